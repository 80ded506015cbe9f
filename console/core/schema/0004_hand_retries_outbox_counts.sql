-- An event retried by hand is usually the one that kept failing: it is claimed alone, like any retry,
-- so it cannot take healthy events down with it, while still getting a fresh attempt budget.
ALTER TABLE inbox ADD COLUMN claim_alone INTEGER NOT NULL DEFAULT 0;
CREATE INDEX inbox_alone ON inbox (id) WHERE status = 'pending' AND claim_alone = 1;
DROP INDEX inbox_fresh;
CREATE INDEX inbox_fresh ON inbox (id) WHERE status = 'pending' AND attempts = 0 AND claim_alone = 0;

-- Outbox counts by status kept by triggers, so status() reads no whole table.
CREATE TABLE outbox_counts (
    status TEXT PRIMARY KEY,
    n      INTEGER NOT NULL
) WITHOUT ROWID;
INSERT INTO outbox_counts (status, n) VALUES ('queued', 0), ('sending', 0), ('sent', 0), ('failed', 0);
UPDATE outbox_counts SET n = (SELECT COUNT(*) FROM outbox WHERE outbox.status = outbox_counts.status);
CREATE TRIGGER outbox_count_insert AFTER INSERT ON outbox BEGIN
    UPDATE outbox_counts SET n = n + 1 WHERE status = NEW.status;
END;
CREATE TRIGGER outbox_count_update AFTER UPDATE OF status ON outbox WHEN OLD.status <> NEW.status BEGIN
    UPDATE outbox_counts SET n = n - 1 WHERE status = OLD.status;
    UPDATE outbox_counts SET n = n + 1 WHERE status = NEW.status;
END;
CREATE TRIGGER outbox_count_delete AFTER DELETE ON outbox BEGIN
    UPDATE outbox_counts SET n = n - 1 WHERE status = OLD.status;
END;
