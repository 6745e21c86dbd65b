//! The host under abuse, on the real apiserver: its webhook server serves only the
//! apiserver when given a client CA (`server`), plugins that take all the memory they may
//! are held to their share of the host-wide budget while a neighbour keeps working, and a
//! slow or looping load holds up no other (`memory_and_loads`), and runaway compute is
//! throttled while honest work is not (`compute`).

mod compute;
mod memory_and_loads;
mod server;

use anyhow::{Context, Result, anyhow, bail};
use std::process::Command;
use std::time::Duration;
use wasmop_e2e::*;
