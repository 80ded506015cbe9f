-- An inbox's part in a move (`agent-console migrate`), one row at most: `moving` (the source while it is
-- copied; `other` names the target), `moved` (the source once the copy is complete; `other` names the
-- target), `incomplete` (the target until the copy's last step; `other` names the source). Every write
-- transaction reads it first and refuses while it holds a row, so no write can slip in after the copy's
-- snapshot and nothing lands in a moved inbox. Names never carry a password.
CREATE TABLE move_mark (
    one   INTEGER PRIMARY KEY CHECK (one = 1),
    state TEXT    NOT NULL CHECK (state IN ('moving', 'moved', 'incomplete')),
    other TEXT    NOT NULL,
    at    INTEGER NOT NULL
);
