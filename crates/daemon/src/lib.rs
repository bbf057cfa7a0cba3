//! znswap's daemon: one zoned device for many programs (`docs/daemon.md`). Every program
//! started with `znswap run --daemon` hands its heap over on a unix socket, and the
//! daemon's one pager (`Pager::serve`) pages it with everyone else's, each program and
//! the programs it executes or forks a tenant held to its own memory.
//!
//! - [`daemon`]: the daemon's state (its pager, its tenants' grants).
//! - `run.rs`: starting it ([`run`]).
//! - `listen.rs`: the socket, accepting connections, the stop signals.
//! - `serve.rs`: one connection, by its first message.
//! - [`connection`]: a served process's calls (discards, forks) and forks' snapshots.
//! - [`tenants`]: who holds what of the daemon's memory.
//! - `status.rs`: `znswap status`'s answer.

pub mod connection;
pub mod daemon;
mod listen;
mod run;
mod serve;
mod status;
pub mod tenants;

pub use listen::default_socket;
pub use run::{check, run, DaemonConfig, Embedded};
pub use tenants::{plural, TENANTS_MAX};
