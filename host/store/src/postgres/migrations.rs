//! The PostgreSQL schema, as numbered migrations the daemon applies at
//! start.
//!
//! Each migration runs once, in order, inside one transaction that holds a
//! transaction-scoped advisory lock, so several instances starting at once
//! apply it once between them; `ferry_schema_version` records what was
//! applied. A database whose schema is newer than this ferry knows is
//! refused rather than misread. Migrations are never edited once released:
//! a change is a new one.

use tokio_postgres::Client;

/// (version, what it does, SQL).
pub const MIGRATIONS: &[(i32, &str, &str)] = &[
    (1, "outbox records, leases, instances and dead letters", V1),
    (2, "keyed records (the SQS endpoint's queues)", V2),
    (3, "the SQS endpoint's queues as tables every instance serves", V3),
    (4, "when each FIFO message group was last served", V4),
];

/// Any fixed number: the advisory lock the migrations are applied under.
const LOCK_KEY: i64 = 0x6665_7272_795f_6d31; // "ferry_m1"

const V1: &str = r#"
CREATE SEQUENCE ferry_outbox_seq;
CREATE TABLE ferry_outbox (
    seq              BIGINT PRIMARY KEY DEFAULT nextval('ferry_outbox_seq'),
    partition        TEXT NOT NULL,
    route            TEXT NOT NULL,
    binding          TEXT NOT NULL,
    address          TEXT NOT NULL,
    envelope_id      TEXT NOT NULL,
    -- MessagePack envelope; NULL once the record is completed.
    envelope         BYTEA,
    replay_count     INTEGER NOT NULL DEFAULT 0,
    created_ms       BIGINT NOT NULL,
    next_attempt_ms  BIGINT NOT NULL,
    first_failure_ms BIGINT,
    claimed_by       BIGINT NOT NULL DEFAULT 0,
    -- NULL while pending; once completed, the duplicate key is kept until
    -- then, and the row is swept after.
    kept_until       TIMESTAMPTZ
);
ALTER SEQUENCE ferry_outbox_seq OWNED BY ferry_outbox.seq;
CREATE UNIQUE INDEX ferry_outbox_key ON ferry_outbox (partition, envelope_id, binding, address);
CREATE INDEX ferry_outbox_pending ON ferry_outbox (partition, seq) WHERE kept_until IS NULL;
CREATE INDEX ferry_outbox_kept ON ferry_outbox (kept_until) WHERE kept_until IS NOT NULL;

CREATE TABLE ferry_leases (
    partition  TEXT PRIMARY KEY,
    owner      TEXT NOT NULL,
    version    BIGINT NOT NULL,
    expires_at TIMESTAMPTZ NOT NULL
);

CREATE TABLE ferry_instances (
    owner      TEXT PRIMARY KEY,
    expires_at TIMESTAMPTZ NOT NULL
);

CREATE TABLE ferry_dead_letters (
    id         BIGSERIAL PRIMARY KEY,
    route      TEXT NOT NULL,
    created_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    -- MessagePack DeadLetter.
    entry      BYTEA NOT NULL
);
CREATE INDEX ferry_dead_letters_route ON ferry_dead_letters (route, id);
"#;

const V2: &str = r#"
CREATE TABLE ferry_records (
    space TEXT NOT NULL,
    key   TEXT NOT NULL,
    value BYTEA NOT NULL,
    PRIMARY KEY (space, key)
);
"#;

/// The SQS endpoint's queues on a shared store, which every instance
/// serves at once (`ferry-sqs-endpoint`'s `shared` module runs the
/// statements): the registry, one row per message with its visibility and
/// receipt as columns (receives claim rows `FOR UPDATE SKIP LOCKED`), and
/// the FIFO deduplication window. A queue's messages and dedup entries go
/// with it.
const V3: &str = r#"
CREATE SEQUENCE ferry_sqs_seq;
CREATE TABLE ferry_sqs_queues (
    name      TEXT PRIMARY KEY,
    -- MessagePack QueueMeta.
    meta      BYTEA NOT NULL,
    purged_ms BIGINT
);
CREATE TABLE ferry_sqs_messages (
    queue            TEXT NOT NULL REFERENCES ferry_sqs_queues (name) ON DELETE CASCADE,
    seq              BIGINT NOT NULL,
    grp              TEXT,
    sent_ms          BIGINT NOT NULL,
    visible_at_ms    BIGINT NOT NULL,
    receive_count    INTEGER NOT NULL DEFAULT 0,
    first_receive_ms BIGINT,
    receipt          TEXT,
    source_arn       TEXT,
    -- MessagePack Stored: what was sent.
    stored           BYTEA NOT NULL,
    PRIMARY KEY (queue, seq)
);
CREATE TABLE ferry_sqs_dedup (
    queue      TEXT NOT NULL REFERENCES ferry_sqs_queues (name) ON DELETE CASCADE,
    dedup_id   TEXT NOT NULL,
    until_ms   BIGINT NOT NULL,
    message_id TEXT NOT NULL,
    sequence   BIGINT,
    PRIMARY KEY (queue, dedup_id)
);
"#;

/// FIFO receives serve the message group served least recently first, as
/// SQS does: `served` is the `ferry_sqs_seq` value of the receive that last
/// took a message of the group. It goes with its queue.
const V4: &str = r#"
CREATE TABLE ferry_sqs_groups (
    queue  TEXT NOT NULL REFERENCES ferry_sqs_queues (name) ON DELETE CASCADE,
    grp    TEXT NOT NULL,
    served BIGINT NOT NULL,
    PRIMARY KEY (queue, grp)
);
"#;

/// Why the schema could not be brought up to date.
#[derive(Debug, thiserror::Error)]
pub enum MigrateError {
    #[error("the database's ferry schema is version {found}; this ferry knows versions up to {known}")]
    Newer { found: i32, known: i32 },
    #[error("{0}")]
    Db(#[from] tokio_postgres::Error),
}

/// Applies every migration the database lacks; returns the versions applied.
pub async fn migrate(client: &mut Client) -> Result<Vec<i32>, MigrateError> {
    let txn = client.transaction().await?;
    txn.execute("SELECT pg_advisory_xact_lock($1)", &[&LOCK_KEY]).await?;
    txn.batch_execute(
        "CREATE TABLE IF NOT EXISTS ferry_schema_version (
             version     INTEGER PRIMARY KEY,
             description TEXT NOT NULL,
             applied_at  TIMESTAMPTZ NOT NULL DEFAULT now()
         )",
    )
    .await?;
    let row = txn.query_one("SELECT COALESCE(max(version), 0) FROM ferry_schema_version", &[]).await?;
    let current: i32 = row.get(0);
    let known = MIGRATIONS.last().map_or(0, |(v, _, _)| *v);
    if current > known {
        return Err(MigrateError::Newer { found: current, known });
    }
    let mut applied = Vec::new();
    for (version, description, sql) in MIGRATIONS.iter().filter(|(v, _, _)| *v > current) {
        txn.batch_execute(sql).await?;
        txn.execute("INSERT INTO ferry_schema_version (version, description) VALUES ($1, $2)", &[version, description])
            .await?;
        applied.push(*version);
    }
    txn.commit().await?;
    Ok(applied)
}
