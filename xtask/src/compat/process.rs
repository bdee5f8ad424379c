//! The processes of the compat task, which the crash, cluster and bench tasks use too: the
//! server ([`Server`], stopped when dropped), its log ([`log_tail`]), the work directory
//! ([`WorkDir`]) and free loopback ports.

use std::{
    env, fs,
    io::{BufRead, BufReader},
    net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream},
    path::{Path, PathBuf},
    process::{Child, Command, ExitStatus, Stdio},
    thread,
    time::{Duration, Instant, SystemTime, UNIX_EPOCH},
};

use anyhow::{bail, Context, Result};

use super::shown;

/// How long the server may take to exit after SIGTERM before it is killed.
const STOP_TIMEOUT: Duration = Duration::from_secs(5);
/// Lines of the server log shown when something failed.
pub(crate) const LOG_TAIL_LINES: usize = 80;

/// A free TCP port on the loopback interface: bind port 0, read the port, close.
pub(crate) fn free_port() -> Result<u16> {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .context("binding 127.0.0.1:0 for a free port")?;
    Ok(listener.local_addr().context("reading the bound address")?.port())
}

/// Waits for `child` to exit, at most `timeout`; kills it after that (`Ok(None)`).
pub(crate) fn wait_at_most(child: &mut Child, timeout: Duration) -> Result<Option<ExitStatus>> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(status) = child.try_wait().context("waiting for a child process")? {
            return Ok(Some(status));
        }
        if Instant::now() >= deadline {
            // Already exited in between is fine: kill only fails then.
            let _ = child.kill();
            let _ = child.wait();
            return Ok(None);
        }
        thread::sleep(Duration::from_millis(100));
    }
}

/// The server process. Dropping it stops the process (SIGTERM, then SIGKILL).
#[derive(Debug)]
pub(crate) struct Server {
    pub(crate) child: Option<Child>,
    log: PathBuf,
}

impl Server {
    /// Starts `command` with stdout and stderr appended to `log`.
    pub(crate) fn start(mut command: Command, log: &Path) -> Result<Server> {
        let out = fs::File::create(log).with_context(|| format!("creating {}", log.display()))?;
        let err = out.try_clone().context("sharing the log file")?;
        command.stdin(Stdio::null()).stdout(out).stderr(err);
        eprintln!("$ {} > {} 2>&1", shown(&command), log.display());
        let child =
            command.spawn().with_context(|| format!("could not start `{}`", shown(&command)))?;
        Ok(Server { child: Some(child), log: log.to_owned() })
    }

    /// Waits until `addr` accepts TCP connections; fails if the process exits first or `timeout`
    /// passes, showing the log.
    pub(crate) fn wait_until_listening(
        &mut self,
        addr: SocketAddr,
        timeout: Duration,
    ) -> Result<()> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.exited()? {
                bail!(
                    "the server exited before listening on {addr} ({status})\n{}",
                    log_tail(&self.log, LOG_TAIL_LINES)
                );
            }
            if TcpStream::connect_timeout(&addr, Duration::from_millis(250)).is_ok() {
                return Ok(());
            }
            if Instant::now() >= deadline {
                bail!(
                    "the server did not listen on {addr} within {timeout:?}\n{}",
                    log_tail(&self.log, LOG_TAIL_LINES)
                );
            }
            thread::sleep(Duration::from_millis(100));
        }
    }

    /// The exit status, if the process has exited.
    pub(crate) fn exited(&mut self) -> Result<Option<ExitStatus>> {
        match &mut self.child {
            Some(child) => child.try_wait().context("checking on the server process"),
            None => Ok(None),
        }
    }

    /// Stops the process: SIGTERM (graceful shutdown), then SIGKILL after [`STOP_TIMEOUT`].
    pub(crate) fn stop(&mut self) {
        let Some(mut child) = self.child.take() else { return };
        if let Ok(Some(_)) = child.try_wait() {
            return;
        }
        let terminated = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|status| status.success());
        if terminated {
            let deadline = Instant::now() + STOP_TIMEOUT;
            while Instant::now() < deadline {
                if let Ok(Some(_)) = child.try_wait() {
                    return;
                }
                thread::sleep(Duration::from_millis(50));
            }
            eprintln!(
                "xtask: the server did not stop within {STOP_TIMEOUT:?} of SIGTERM: killing it"
            );
        }
        let _ = child.kill();
        let _ = child.wait();
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The last `lines` lines of the log, framed, for failure reports.
pub(crate) fn log_tail(log: &Path, lines: usize) -> String {
    let Ok(file) = fs::File::open(log) else {
        return format!("(no server log at {})", log.display());
    };
    let all: Vec<String> = BufReader::new(file).lines().map_while(Result::ok).collect();
    let start = all.len().saturating_sub(lines);
    format!(
        "---- server log {} (last {} of {} lines) ----\n{}\n---- end of server log ----",
        log.display(),
        all.len() - start,
        all.len(),
        all[start..].join("\n")
    )
}

/// A fresh directory under the system temp dir for the config and the server log (and, for the
/// crash test, the data directory).
#[derive(Debug)]
pub(crate) struct WorkDir {
    pub(crate) path: PathBuf,
}

impl WorkDir {
    /// `ironbus-<task>-<pid>-<nanos>` under the temp dir.
    pub(crate) fn create(task: &str) -> Result<WorkDir> {
        let nanos = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.subsec_nanos());
        let path = env::temp_dir().join(format!("ironbus-{task}-{}-{nanos}", std::process::id()));
        fs::create_dir_all(&path).with_context(|| format!("creating {}", path.display()))?;
        Ok(WorkDir { path })
    }

    /// Removes the directory (after a successful run; failures keep it for inspection).
    pub(crate) fn remove(self) {
        let _ = fs::remove_dir_all(&self.path);
    }
}
