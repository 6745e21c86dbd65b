//! A plugin's stdout and stderr, turned into host log lines.
//!
//! A plugin cannot fill the host's log: each call gets a byte budget (shared by both
//! streams); past it, output is dropped and one line says so. Writes never fail, so a
//! chatty plugin is silenced rather than trapped.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll};
use tokio::io::AsyncWrite;
use wasmtime_wasi::cli::{IsTerminal, StdoutStream};

/// Longest line kept; longer ones are cut with a marker.
const MAX_LINE: usize = 4096;

#[derive(Clone)]
pub struct PluginOutput {
    plugin: Arc<str>,
    stream: &'static str,
    budget: Arc<AtomicUsize>,
}

impl PluginOutput {
    /// stdout and stderr sharing one budget of `bytes` for one call.
    pub fn pair(plugin: Arc<str>, bytes: usize) -> (Self, Self) {
        let budget = Arc::new(AtomicUsize::new(bytes));
        (
            PluginOutput { plugin: plugin.clone(), stream: "stdout", budget: budget.clone() },
            PluginOutput { plugin, stream: "stderr", budget },
        )
    }

    /// Gives the pair a new budget of `bytes`: a warm instance's next call.
    pub fn refill(&self, bytes: usize) {
        self.budget.store(bytes, Ordering::Relaxed);
    }
}

impl IsTerminal for PluginOutput {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl StdoutStream for PluginOutput {
    fn async_stream(&self) -> Box<dyn AsyncWrite + Send + Sync> {
        Box::new(LineWriter { out: self.clone(), line: Vec::new(), exhausted: false })
    }
}

struct LineWriter {
    out: PluginOutput,
    line: Vec<u8>,
    exhausted: bool,
}

impl LineWriter {
    fn emit(&mut self) {
        if self.line.is_empty() {
            return;
        }
        let text = String::from_utf8_lossy(&self.line);
        tracing::info!(plugin = %self.out.plugin, stream = self.out.stream, "{}", text.trim_end());
        self.line.clear();
    }

    fn take(&mut self, buf: &[u8]) {
        let want = buf.len();
        let granted = self
            .out
            .budget
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |left| Some(left.saturating_sub(want)))
            .unwrap_or(0)
            .min(want);
        for &b in &buf[..granted] {
            if b == b'\n' {
                self.emit();
            } else if self.line.len() < MAX_LINE {
                self.line.push(b);
            } else if self.line.len() == MAX_LINE {
                self.line.extend_from_slice(" [line cut]".as_bytes());
            }
        }
        if granted < want && !self.exhausted {
            self.exhausted = true;
            self.emit();
            tracing::warn!(plugin = %self.out.plugin, stream = self.out.stream, "output budget for this call used up; further output dropped");
        }
    }
}

impl AsyncWrite for LineWriter {
    fn poll_write(mut self: Pin<&mut Self>, _: &mut Context<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
        self.take(buf);
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        self.emit();
        Poll::Ready(Ok(()))
    }
}

impl Drop for LineWriter {
    fn drop(&mut self) {
        self.emit();
    }
}
