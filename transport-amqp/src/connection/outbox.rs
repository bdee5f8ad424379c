//! The connection's writer: `Outbox`, what the connection loop and its writer task share (the
//! bytes handed over and not yet written, the abort), and `write_loop`, the task that writes
//! them in order and ends the connection when the client stops reading.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use bytes::Bytes;
use tokio::io::{AsyncWrite, AsyncWriteExt};
use tokio::sync::{mpsc, Notify};

use super::ABORT_GRACE;
use crate::AmqpStats;

/// What a connection and its writer task share: the bytes handed over and not yet written,
/// and how the writer is stopped early (or says it stopped).
pub(super) struct Outbox {
    /// Bytes handed to the writer and not yet written to the socket.
    pub(super) queued: AtomicUsize,
    /// A Close frame the writer writes (if it can) instead of what is still queued.
    pub(super) close: Mutex<Option<Bytes>>,
    /// Set when `close` is.
    pub(super) abort: Notify,
    /// Set when the writer stopped before the connection ended (socket error or stall).
    pub(super) gone: Notify,
    /// The writer stopped because the socket accepted nothing for the stall time-out.
    pub(super) stalled: AtomicBool,
    /// Deliveries wait for the writer, which wakes the connection when it is under half the
    /// limit again.
    pub(super) paused: AtomicBool,
    pub(super) stats: Arc<AmqpStats>,
}

impl Drop for Outbox {
    fn drop(&mut self) {
        // What was never written is no longer buffered.
        let left = *self.queued.get_mut();
        self.stats.write_buffered.fetch_sub(left, Ordering::Relaxed);
    }
}

impl Outbox {
    /// Whether `queued` plus `out_len` bytes are too many to write more deliveries; if so the
    /// writer wakes the connection once it is under `resume_below` again. (The flag is set
    /// before the second look, so a wake-up cannot be missed.)
    pub(super) fn must_wait(&self, out_len: usize, resume_below: usize) -> bool {
        if self.queued.load(Ordering::SeqCst) + out_len < resume_below {
            return false;
        }
        self.paused.store(true, Ordering::SeqCst);
        if self.queued.load(Ordering::SeqCst) + out_len < resume_below {
            self.paused.store(false, Ordering::SeqCst);
            return false;
        }
        true
    }

    /// What a socket write or flush the writer gave its stall time-out to make progress came
    /// to: its result, or `None` when the writer must stop, having said why (`gone`, and
    /// `stalled` when the socket accepted nothing in time rather than failed). Takes the
    /// outcome rather than the future, so that the writer's future holds no more than the
    /// time-out.
    pub(super) fn within_stall<T>(
        &self,
        outcome: Result<std::io::Result<T>, tokio::time::error::Elapsed>,
    ) -> Option<T> {
        match outcome {
            Ok(Ok(value)) => return Some(value),
            Ok(Err(_)) => {}
            Err(_) => self.stalled.store(true, Ordering::Release),
        }
        self.gone.notify_one();
        None
    }

    pub(super) fn written(&self, n: usize, resume_below: usize, watcher: &Notify) {
        let before = self.queued.fetch_sub(n, Ordering::SeqCst);
        self.stats.write_buffered.fetch_sub(n, Ordering::Relaxed);
        // Deliveries paused for the writer may go on.
        if before - n < resume_below && self.paused.swap(false, Ordering::SeqCst) {
            watcher.notify_one();
        }
    }
}

/// Writes what the connection hands over, in order, and flushes whenever nothing more is
/// waiting (a TLS or WebSocket stream may hold back what it accepted until then). A socket that
/// accepts no byte for `stall` while bytes wait ends the writer (and so the connection): the
/// client is not reading. Asked to abort, it finishes the chunk it is in (the peer must see
/// whole frames), writes the Close frame instead of the rest and ends, or gives up after
/// `stall`.
pub(super) async fn write_loop<W: AsyncWrite + Unpin>(
    mut write: W,
    mut rx: mpsc::UnboundedReceiver<Bytes>,
    outbox: Arc<Outbox>,
    watcher: Arc<Notify>,
    stall: Duration,
    resume_below: usize,
) {
    let mut rest = Bytes::new();
    let mut unflushed = false;
    loop {
        if unflushed && rx.is_empty() {
            unflushed = false;
            tokio::select! {
                biased;
                () = outbox.abort.notified() => break,
                flushed = tokio::time::timeout(stall, write.flush()) => {
                    if outbox.within_stall(flushed).is_none() {
                        return;
                    }
                }
            }
        }
        let mut chunk = tokio::select! {
            biased;
            () = outbox.abort.notified() => break,
            next = rx.recv() => match next {
                Some(chunk) => chunk,
                None => {
                    let _ = tokio::time::timeout(stall, write.shutdown()).await;
                    return;
                }
            },
        };
        while !chunk.is_empty() {
            tokio::select! {
                biased;
                () = outbox.abort.notified() => {
                    rest = chunk;
                    break;
                }
                written = tokio::time::timeout(stall, write.write_buf(&mut chunk)) => {
                    match outbox.within_stall(written) {
                        Some(n) if n > 0 => {
                            unflushed = true;
                            outbox.written(n, resume_below, &watcher);
                        }
                        // The socket took no byte: it is closed.
                        Some(_) => {
                            outbox.gone.notify_one();
                            return;
                        }
                        None => return,
                    }
                }
            }
        }
        if !rest.is_empty() {
            break;
        }
    }
    // Aborted: the rest of the frame being written, then the Close, if the peer takes them.
    let close = outbox.close.lock().unwrap_or_else(PoisonError::into_inner).take();
    let finish = async {
        write.write_all_buf(&mut rest).await?;
        if let Some(close) = close {
            write.write_all(&close).await?;
        }
        write.shutdown().await
    };
    let _ = tokio::time::timeout(stall.min(ABORT_GRACE), finish).await;
}
