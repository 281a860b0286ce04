"""Pictures and pages: what a person looks at, in a notebook or a browser.

* ``plots``: matplotlib figures of state sizes, key-group skew, top keys and rescale previews
  (documented as ``statecat.catalog.plots``);
* ``page``: ``statecat report``, one self-contained HTML page of a savepoint.

The HTML building blocks are ``statemeta.html``'s, shared with the rich display (``_repr_html_``)
of the StateMeta model, the readers' tables and an attach result, which cannot import upwards.

May import: ``statemeta``, ``readers`` and ``catalog.render``. No Spark.
"""
