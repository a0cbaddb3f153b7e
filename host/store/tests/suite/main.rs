//! The store's integration tests, one binary: the embedded (redb) and
//! PostgreSQL stores, concurrent writers, and the outbox under load.

mod concurrency;
mod embedded;
mod postgres;
mod stress;
