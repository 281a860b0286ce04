"""Pictures and pages: what a person looks at, in a notebook or a browser.

* ``plots``: matplotlib figures of state sizes, key-group skew, top keys and rescale previews
  (documented as ``statecat.catalog.plots``);
* ``page``: ``statecat report``, one self-contained HTML page of a savepoint, and the rich
  display of an attach result.

The HTML building blocks are ``statemeta.html``'s, shared with the StateMeta model's and the
readers' own rich display (which cannot import upwards into ``catalog``).

May import: ``statemeta``, ``readers`` and ``catalog.render``. No Spark.
"""
