-- netctl journal, version 3: indexes for the read paths (`netctl journal`, `netctl ipam`).
--
-- attachment_addresses: every address an attachment's result names (`ips[].address`
-- without its prefix length, lower case), kept by triggers whenever a result is written,
-- so "who had this IP" looks the address up instead of decoding every result. Results are
-- never cleared, so a removed attachment's addresses stay: the table is history too. A
-- result that is not JSON, or an `ips` entry without a string address, adds nothing (and
-- never fails the write).

CREATE TABLE attachment_addresses (
    attachment_id   INTEGER NOT NULL REFERENCES attachments (id),
    address         TEXT    NOT NULL
);
CREATE INDEX attachment_addresses_address ON attachment_addresses (address);
CREATE INDEX attachment_addresses_attachment ON attachment_addresses (attachment_id);

-- (the same expression three times: a trigger must not scan the table, so each parses
-- NEW.result alone)
CREATE TRIGGER attachment_addresses_insert AFTER INSERT ON attachments
WHEN NEW.result IS NOT NULL BEGIN
    INSERT INTO attachment_addresses (attachment_id, address)
        SELECT NEW.id, lower(CASE WHEN instr(a, '/') > 0 THEN substr(a, 1, instr(a, '/') - 1)
                                  ELSE a END)
        FROM (SELECT json_extract(ip.value, '$.address') AS a
              FROM json_each(CASE WHEN json_valid(CAST(NEW.result AS TEXT))
                                  THEN CAST(NEW.result AS TEXT) ELSE '{}' END, '$.ips') AS ip
              WHERE ip.type = 'object')
        WHERE typeof(a) = 'text';
END;

CREATE TRIGGER attachment_addresses_update AFTER UPDATE OF result ON attachments BEGIN
    DELETE FROM attachment_addresses WHERE attachment_id = NEW.id;
    INSERT INTO attachment_addresses (attachment_id, address)
        SELECT NEW.id, lower(CASE WHEN instr(a, '/') > 0 THEN substr(a, 1, instr(a, '/') - 1)
                                  ELSE a END)
        FROM (SELECT json_extract(ip.value, '$.address') AS a
              FROM json_each(CASE WHEN json_valid(CAST(NEW.result AS TEXT))
                                  THEN CAST(NEW.result AS TEXT) ELSE '{}' END, '$.ips') AS ip
              WHERE ip.type = 'object')
        WHERE typeof(a) = 'text';
END;

CREATE TRIGGER attachment_addresses_delete AFTER DELETE ON attachments BEGIN
    DELETE FROM attachment_addresses WHERE attachment_id = OLD.id;
END;

-- what the journal holds already
INSERT INTO attachment_addresses (attachment_id, address)
    SELECT id, lower(CASE WHEN instr(a, '/') > 0 THEN substr(a, 1, instr(a, '/') - 1)
                          ELSE a END)
    FROM (SELECT at.id AS id, json_extract(ip.value, '$.address') AS a
          FROM attachments at, json_each(CASE WHEN json_valid(CAST(at.result AS TEXT))
                                              THEN CAST(at.result AS TEXT) ELSE '{}' END,
                                         '$.ips') AS ip
          WHERE ip.type = 'object')
    WHERE typeof(a) = 'text'
    ORDER BY id;

-- `netctl journal --since`: attachments created, or removed, since then, or still live.
CREATE INDEX attachments_created ON attachments (created_at);
CREATE INDEX attachments_removed ON attachments (removed_at);

-- `netctl ipam pools|show|leaks`: a pool's live allocations without its released history.
CREATE INDEX ipam_live_pool ON ipam_allocations (pool, id) WHERE released_at IS NULL;
