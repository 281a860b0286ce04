package statecat.spark;

/**
 * An error statecat's Python worker reported. Its message is the Python error's text: for a state
 * statecat cannot read, "StatecatQueryError: ..." (what statecat's CLI and tests pick out).
 */
public final class StatecatPythonException extends RuntimeException {
    public StatecatPythonException(String message) {
        super(message, null, false, false);
    }
}
