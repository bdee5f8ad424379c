//! The model-based case: random batches against a `BTreeMap` model.

use super::*;

/// Seeds of [`model_based_random_ops_match_btreemap`]; a failure names the seed and step.
pub const MODEL_SEEDS: [u64; 5] = [0, 1, 7, 42, 0x1b05_5eed_cafe_f00d];
/// Random operations per seed.
pub const MODEL_STEPS: usize = 400;

#[derive(Debug, Clone)]
enum ModelOp {
    Write(WriteBatch),
    Get(Vec<u8>),
    Scan { start: Vec<u8>, end: Vec<u8>, limit: usize },
}

/// A key from a small alphabet rich in edge bytes, so that operations collide and ordering
/// edges (0x00, 0xff, prefixes) come up often. Never empty.
fn random_key(rng: &mut ChaCha8Rng) -> Vec<u8> {
    const ALPHABET: [u8; 6] = [0x00, 0x01, b'a', 0x7f, 0xfe, 0xff];
    let len = rng.gen_range(1..=3);
    (0..len).map(|_| ALPHABET[rng.gen_range(0..ALPHABET.len())]).collect()
}

/// A range end: usually a key, sometimes empty ("no upper bound").
fn random_end(rng: &mut ChaCha8Rng) -> Vec<u8> {
    if rng.gen_bool(0.15) {
        Vec::new()
    } else {
        random_key(rng)
    }
}

type Model = BTreeMap<Vec<u8>, Vec<u8>>;

fn random_batch(rng: &mut ChaCha8Rng, model: &Model) -> WriteBatch {
    let mut batch = WriteBatch::new();
    // Sometimes guards: mostly on what the model holds (so they hold), sometimes not.
    if rng.gen_bool(0.25) {
        for _ in 0..rng.gen_range(1..=2) {
            let key = random_key(rng);
            let expected = match rng.gen_range(0..10) {
                0..=6 => model.get(&key).cloned(),
                7 => None,
                _ => Some(vec![rng.gen_range(0..4)]),
            };
            batch.require(key, expected.map(Bytes::from));
        }
    }
    // Mostly small batches, sometimes empty ones.
    for _ in 0..rng.gen_range(0..=6) {
        match rng.gen_range(0..10) {
            0..=5 => {
                let len = rng.gen_range(0..=4);
                let value: Vec<u8> = (0..len).map(|_| rng.gen()).collect();
                batch.put(random_key(rng), value);
            }
            6..=8 => batch.delete(random_key(rng)),
            _ => batch.delete_range(random_key(rng), random_end(rng)),
        }
    }
    batch
}

fn random_op(rng: &mut ChaCha8Rng, model: &Model) -> ModelOp {
    match rng.gen_range(0..10) {
        0..=4 => ModelOp::Write(random_batch(rng, model)),
        5..=6 => ModelOp::Get(random_key(rng)),
        _ => ModelOp::Scan {
            start: if rng.gen_bool(0.1) { Vec::new() } else { random_key(rng) },
            end: random_end(rng),
            limit: if rng.gen_bool(0.3) { usize::MAX } else { rng.gen_range(0..6) },
        },
    }
}

pub(super) fn model_apply(model: &mut BTreeMap<Vec<u8>, Vec<u8>>, batch: &WriteBatch) {
    for op in batch.ops() {
        match op {
            BatchOp::Put { key, value } => {
                model.insert(key.to_vec(), value.to_vec());
            }
            BatchOp::Delete { key } => {
                model.remove(&key[..]);
            }
            BatchOp::DeleteRange { start, end } => {
                if let Some(range) = range_bounds(start, end) {
                    let doomed: Vec<Vec<u8>> =
                        model.range::<[u8], _>(range).map(|(k, _)| k.clone()).collect();
                    for k in doomed {
                        model.remove(&k);
                    }
                }
            }
        }
    }
}

fn model_scan(
    model: &BTreeMap<Vec<u8>, Vec<u8>>,
    start: &[u8],
    end: &[u8],
    limit: usize,
) -> Vec<(Vec<u8>, Vec<u8>)> {
    match range_bounds(start, end) {
        Some(range) => {
            model.range::<[u8], _>(range).take(limit).map(|(k, v)| (k.clone(), v.clone())).collect()
        }
        None => Vec::new(),
    }
}

pub(super) fn owned(kvs: Vec<KeyValue>) -> Vec<(Vec<u8>, Vec<u8>)> {
    kvs.into_iter().map(|(k, v)| (k.to_vec(), v.to_vec())).collect()
}

/// Random writes (some guarded), gets and scans against the store and a `BTreeMap` model, for
/// each of [`MODEL_SEEDS`]; a write must succeed exactly when its guards hold in the model (and
/// otherwise conflict), and every read and, after every write, the whole contents must match.
pub async fn model_based_random_ops_match_btreemap(store: Arc<dyn Store>) {
    for (run, seed) in MODEL_SEEDS.into_iter().enumerate() {
        // Each seed starts from an empty store: clear what the previous seed left.
        if run > 0 {
            let mut clear = WriteBatch::new();
            for (key, _) in scan_all(&*store).await {
                clear.delete(key);
            }
            write(&*store, clear).await;
            assert!(scan_all(&*store).await.is_empty(), "seed {seed}: store not cleared");
        }
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let mut model = BTreeMap::new();
        for step in 0..MODEL_STEPS {
            let op = random_op(&mut rng, &model);
            match &op {
                ModelOp::Write(batch) => {
                    let holds = batch
                        .guards()
                        .iter()
                        .all(|g| g.holds(model.get(&g.key[..]).map(Vec::as_slice)));
                    match store.write(batch.clone()).await {
                        Ok(()) if holds => model_apply(&mut model, batch),
                        Err(e) if !holds && e.kind == StoreErrorKind::Conflict => {}
                        outcome => panic!(
                            "seed {seed} step {step}: {op:?}: guards hold: {holds}, got {outcome:?}"
                        ),
                    }
                    let actual = owned(scan_all(&*store).await);
                    let expected: Vec<_> = model.clone().into_iter().collect();
                    assert_eq!(actual, expected, "seed {seed} step {step}: contents after {op:?}");
                }
                ModelOp::Get(key) => {
                    let actual = get(&*store, key).await.map(|v| v.to_vec());
                    assert_eq!(actual, model.get(key).cloned(), "seed {seed} step {step}: {op:?}");
                }
                ModelOp::Scan { start, end, limit } => {
                    let actual = owned(scan(&*store, start, end, *limit).await);
                    let expected = model_scan(&model, start, end, *limit);
                    assert_eq!(actual, expected, "seed {seed} step {step}: {op:?}");
                }
            }
        }
    }
}
