//! A host process per test, with its own plugin directory and log; killed when dropped.

use crate::*;
use anyhow::{Context, Result, bail};
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

/// A host process with its own plugin directory; killed when dropped.
pub struct Host {
    pub dir: tempfile::TempDir,
    pub log: PathBuf,
    child: Option<Child>,
    extra: Vec<String>,
    env: Vec<(String, String)>,
}

impl Host {
    /// A host with `plugins` (name, path, settings) in its plugin dir. Each acts as its
    /// own ServiceAccount (`default/NAME`), granted what `wasmop rbac` prints for it
    /// first, as a cluster admin would.
    pub fn start(plugins: &[(&str, &Path, &str)], extra: &[&str]) -> Result<Host> {
        Self::start_with_env(plugins, extra, &[])
    }

    /// Like [`Host::start`], with extra environment (e.g. `POD_NAME`, the leader identity).
    pub fn start_with_env(plugins: &[(&str, &Path, &str)], extra: &[&str], env: &[(&str, &str)]) -> Result<Host> {
        let dir = tempfile::tempdir()?;
        let plugins_dir = dir.path().join("plugins");
        std::fs::create_dir_all(&plugins_dir)?;
        for (name, path, settings) in plugins {
            grant(path, name, settings, DIR_PLUGIN_ACCOUNTS)?;
            // A script plugin keeps its extension: the host tells the formats apart by it.
            let ext = if path.extension().is_some_and(|e| e == "js") { "js" } else { "wasm" };
            std::fs::copy(path, plugins_dir.join(format!("{name}.{ext}")))
                .with_context(|| format!("copy {}", path.display()))?;
            if !settings.is_empty() {
                std::fs::write(plugins_dir.join(format!("{name}.settings.yaml")), settings)?;
            }
        }
        let log = dir.path().join("host.log");
        let mut h = Host {
            dir,
            log,
            child: None,
            extra: extra.iter().map(|s| s.to_string()).collect(),
            env: env.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
        };
        h.spawn()?;
        Ok(h)
    }

    pub fn plugins_dir(&self) -> PathBuf {
        self.dir.path().join("plugins")
    }

    fn spawn(&mut self) -> Result<()> {
        let log = std::fs::OpenOptions::new().create(true).append(true).open(&self.log)?;
        let child = Command::new(wasmop_bin())
            .arg("run")
            .arg("--plugins-dir")
            .arg(self.plugins_dir())
            .args(["--metrics-bind-address", "127.0.0.1:0"])
            .args(["--plugins-dir-service-account-namespace", DIR_PLUGIN_ACCOUNTS])
            .args(&self.extra)
            .env("KUBECONFIG", kubeconfig())
            .env("WASMOP_LOG", "info,wasmop=debug,kube=warn")
            .envs(self.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .with_context(|| format!("start {}", wasmop_bin().display()))?;
        self.child = Some(child);
        Ok(())
    }

    /// SIGKILL, as a crash would.
    pub fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// SIGTERM, then waits up to `timeout` for the exit: Some(exit code), None if still running.
    pub fn terminate(&mut self, timeout: Duration) -> Result<Option<i32>> {
        let Some(c) = self.child.as_mut() else { bail!("not running") };
        let status = Command::new("kill").args(["-TERM", &c.id().to_string()]).status()?;
        if !status.success() {
            bail!("kill -TERM failed");
        }
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if let Some(s) = c.try_wait()? {
                self.child = None;
                return Ok(Some(s.code().unwrap_or(-1)));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok(None)
    }

    pub fn restart(&mut self) -> Result<()> {
        self.kill9();
        self.spawn()
    }

    pub fn logs(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// GET one of the host's own endpoints (`/metrics`, `/readyz`, ...): (status, body).
    pub fn http_get(&self, path: &str) -> Result<(u16, String)> {
        let logs = self.logs();
        let addr = logs
            .lines()
            .rev()
            .find(|l| l.contains("serving /metrics"))
            .and_then(|l| l.split("addr=").nth(1))
            .and_then(|a| a.split_whitespace().next())
            .context("the host has not logged its metrics address yet")?;
        let out =
            Command::new("curl").args(["-s", "-w", "\n%{http_code}"]).arg(format!("http://{addr}{path}")).output()?;
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let (body, code) = text.rsplit_once('\n').context("no status from curl")?;
        Ok((code.trim().parse()?, body.to_owned()))
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(|c| c.id())
    }

    /// Still running?
    pub fn alive(&mut self) -> bool {
        self.child.as_mut().is_some_and(|c| c.try_wait().ok().flatten().is_none())
    }
}

impl Drop for Host {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("---- host log ({}) ----\n{}", self.log.display(), self.logs());
        }
        self.kill9();
    }
}
