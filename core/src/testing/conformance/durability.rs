//! Durability (opt-in): what a store promises survives dropping it and opening it again.

use super::model::{model_apply, owned};
use super::*;

/// What a durability case takes: a factory that opens a store at a directory, and opens it
/// again there after it was closed. Every `Fn(PathBuf) -> impl Future<Output = Arc<S>>` is one.
pub trait OpenAt {
    type Store: Store + ?Sized;
    type Opening: Future<Output = Arc<Self::Store>>;

    /// Opens the store at `dir`.
    fn open_at(&self, dir: PathBuf) -> Self::Opening;
}

impl<F, Fut, S> OpenAt for F
where
    F: Fn(PathBuf) -> Fut,
    Fut: Future<Output = Arc<S>>,
    S: Store + ?Sized,
{
    type Store = S;
    type Opening = Fut;

    fn open_at(&self, dir: PathBuf) -> Fut {
        self(dir)
    }
}

/// Drops the last reference to a store so that it closes before being opened again.
fn close<S: Store + ?Sized>(store: Arc<S>) {
    assert_eq!(
        Arc::strong_count(&store),
        1,
        "the suite holds the only reference, so dropping it must close the store"
    );
    drop(store);
}

pub async fn data_survives_reopen(open_at: impl OpenAt) {
    let dir = TempDir::new("durability");
    let open = || open_at.open_at(dir.path().to_path_buf());
    let store = open().await;
    put_all(&*store, &[(b"a", b"1"), (b"b", b"2"), (b"\xff", b"3")]).await;
    put(&*store, b"b", b"22").await;
    put(&*store, b"empty", b"").await;
    close(store);

    let store = open().await;
    let expected = pairs(&[(b"a", b"1"), (b"b", b"22"), (b"empty", b""), (b"\xff", b"3")]);
    assert_eq!(scan_all(&*store).await, expected);
    assert_eq!(get(&*store, b"b").await.as_deref(), Some(&b"22"[..]));
    // Writes after a reopen survive the next one too.
    put(&*store, b"c", b"4").await;
    close(store);

    let store = open().await;
    assert_eq!(
        scan_all(&*store).await,
        pairs(&[(b"a", b"1"), (b"b", b"22"), (b"c", b"4"), (b"empty", b""), (b"\xff", b"3")])
    );
    close(store);
}

pub async fn batch_survives_reopen_atomically(open_at: impl OpenAt) {
    let dir = TempDir::new("durability");
    let open = || open_at.open_at(dir.path().to_path_buf());
    let store = open().await;
    let mut model = BTreeMap::new();
    let mut first = WriteBatch::new();
    for i in 0..500u32 {
        first.put(format!("k/{i:04}"), i.to_be_bytes().to_vec());
    }
    write(&*store, first.clone()).await;
    model_apply(&mut model, &first);
    // One batch that overwrites, deletes, deletes a range and puts again into it.
    let mut second = WriteBatch::new();
    for i in (0..500u32).step_by(3) {
        second.put(format!("k/{i:04}"), b"overwritten".to_vec());
    }
    for i in (1..500u32).step_by(7) {
        second.delete(format!("k/{i:04}"));
    }
    second.delete_range(&b"k/01"[..], &b"k/02"[..]);
    second.put(&b"k/0150"[..], &b"again"[..]);
    second.put(&b"later"[..], vec![0u8; 64 * 1024]);
    write(&*store, second.clone()).await;
    model_apply(&mut model, &second);
    let expected: Vec<_> = model.into_iter().collect();
    assert_eq!(owned(scan_all(&*store).await), expected, "before reopen");
    close(store);

    let store = open().await;
    assert_eq!(owned(scan_all(&*store).await), expected, "after reopen");
    close(store);
}

pub async fn delete_range_survives_reopen(open_at: impl OpenAt) {
    let dir = TempDir::new("durability");
    let open = || open_at.open_at(dir.path().to_path_buf());
    let store = open().await;
    let mut batch = WriteBatch::new();
    for i in 0..100u32 {
        batch.put(format!("r/{i:03}"), b"v".to_vec());
    }
    batch.put(&b"q"[..], &b"before"[..]);
    batch.put(&b"s"[..], &b"after"[..]);
    write(&*store, batch).await;
    close(store);

    // Delete a range of keys that were written before the reopen (so already persisted).
    let store = open().await;
    let mut batch = WriteBatch::new();
    batch.delete_range(&b"r/"[..], prefix_end(b"r/"));
    write(&*store, batch).await;
    close(store);

    let store = open().await;
    assert_eq!(scan_all(&*store).await, pairs(&[(b"q", b"before"), (b"s", b"after")]));
    assert!(scan(&*store, b"r/", &prefix_end(b"r/"), usize::MAX).await.is_empty());
    close(store);
}
