//! Cost of subscription rules: nanoseconds (and heap bytes) per evaluation of representative
//! SQL and correlation filters against one message, 100 distinct filters of which one matches,
//! and the cost of compiling a filter. Prints one line per case.
//!
//! `cargo bench -p ironbus-core --bench filter [-- --iterations N]`

#![allow(clippy::disallowed_methods, reason = "a benchmark measures wall time")]
#![allow(clippy::print_stdout, reason = "a benchmark prints its figures")]

use std::hint::black_box;
use std::time::Instant;

use cap::Cap;
use clap::Parser;
use ironbus_core::filter::{
    CorrelationFilter, EvalContext, Filter, Parameters, PublishInfo, SqlFilter,
};
use ironbus_core::{Message, PropertyValue, SequenceNumber, Timestamp};

#[global_allocator]
static ALLOCATOR: Cap<std::alloc::System> = Cap::new(std::alloc::System, usize::MAX);

fn message() -> Message {
    let mut m = Message::new(vec![0u8; 1024]);
    let p = &mut m.properties;
    p.message_id = Some("0f8fad5b-d9cb-469f-a165-70867728950e".into());
    p.correlation_id = Some("order-42".into());
    p.subject = Some("Important".into());
    p.to = Some("Store6".into());
    p.content_type = Some("application/json".into());
    let props = [
        ("color", PropertyValue::String("red".into())),
        ("quantity", PropertyValue::Int(10)),
        ("StoreId", PropertyValue::String("Store57".into())),
        ("name", PropertyValue::String("abcdefghijklmnopqrstuvwxyz".into())),
        ("priority", PropertyValue::String("high".into())),
        ("region", PropertyValue::String("westeurope".into())),
        ("tenant", PropertyValue::UInt(7)),
        ("price", PropertyValue::Double(19.99)),
        ("flag", PropertyValue::Bool(true)),
        ("source", PropertyValue::String("checkout".into())),
    ];
    for (k, v) in props {
        m.application_properties.insert(k.to_owned(), v);
    }
    m
}

fn sql(text: &str) -> Filter {
    Filter::Sql(SqlFilter::parse(text, &Parameters::new()).expect(text))
}

/// Runs `f` `iterations` times in 5 rounds; returns the fastest round's ns per call (the
/// machine is shared: the minimum is the least disturbed) and the heap bytes allocated per call
/// over all rounds.
fn measure(iterations: u64, mut f: impl FnMut() -> usize) -> (f64, f64) {
    const ROUNDS: u64 = 5;
    let per_round = (iterations / ROUNDS).max(1);
    for _ in 0..per_round / 5 {
        black_box(f());
    }
    let bytes = ALLOCATOR.total_allocated();
    let mut best = f64::INFINITY;
    let mut matched = 0usize;
    for _ in 0..ROUNDS {
        let start = Instant::now();
        for _ in 0..per_round {
            matched += black_box(f());
        }
        best = best.min(start.elapsed().as_nanos() as f64 / per_round as f64);
    }
    let bytes = ALLOCATOR.total_allocated() - bytes;
    black_box(matched);
    (best, bytes as f64 / (per_round * ROUNDS) as f64)
}

/// Cost of subscription rules: time and heap bytes per evaluation.
#[derive(Debug, Parser)]
struct Options {
    /// Evaluations per case, over all rounds.
    #[arg(long, default_value_t = 2_000_000)]
    iterations: u64,
    /// Passed by `cargo bench`; ignored.
    #[arg(long = "bench", hide = true)]
    _bench: bool,
}

fn main() {
    let Options { iterations, .. } = Options::parse();

    let m = message();
    let publish = PublishInfo {
        enqueued_time: Timestamp::from_millis(1_700_000_000_000),
        sequence_number: SequenceNumber(42),
        size: m.size() as u64,
        ..PublishInfo::default()
    };
    let ctx = EvalContext::with_publish(&m, publish);

    let correlation = Filter::Correlation(CorrelationFilter {
        correlation_id: Some("order-42".into()),
        properties: vec![("color".to_owned(), PropertyValue::String("red".into()))],
        ..CorrelationFilter::default()
    });
    let cases: Vec<(&str, Filter)> = vec![
        ("user property equality: color = 'red'", sql("color = 'red'")),
        ("user property, other casing: Color = 'red'", sql("Color = 'red'")),
        ("LIKE: name LIKE 'abc%xyz'", sql("name LIKE 'abc%xyz'")),
        (
            "IN list of 5: StoreId IN ('Store1', …, 'Store57')",
            sql("StoreId IN ('Store1','Store2','Store3','Store4','Store57')"),
        ),
        ("correlation filter: correlation-id + 1 property", correlation),
        ("sys property: sys.Label = 'Important'", sql("sys.Label = 'Important'")),
        (
            "compound: quantity > 5 AND (price < 20.0 OR flag = FALSE) AND sys.To IS NOT NULL",
            sql("quantity > 5 AND (price < 20.0 OR flag = FALSE) AND sys.To IS NOT NULL"),
        ),
        ("true filter: 1=1", sql("1=1")),
    ];
    let (ns, _) = measure(iterations, || black_box(1));
    println!("{ns:8.1} ns/call  (the measuring loop alone)");
    for (name, filter) in &cases {
        assert!(filter.evaluate(&ctx).unwrap(), "{name} should match the message");
        let (ns, bytes) = measure(iterations, || filter.evaluate(&ctx).unwrap() as usize);
        println!("{ns:8.1} ns/eval {bytes:6.1} B/eval  {name}");
    }

    let hundred: Vec<Filter> =
        (0..100).map(|i| sql(&format!("StoreId = 'Store{i}' AND quantity > 5"))).collect();
    let (ns, bytes) =
        measure(iterations / 100, || hundred.iter().filter(|f| f.evaluate(&ctx).unwrap()).count());
    assert_eq!(hundred.iter().filter(|f| f.evaluate(&ctx).unwrap()).count(), 1);
    println!(
        "{ns:8.1} ns/message ({:.1} ns/rule) {bytes:6.1} B/message  100 distinct filters \
         (StoreId = 'StoreN' AND quantity > 5), one matching",
        ns / 100.0
    );

    let text = "quantity > 5 AND (price < 20.0 OR flag = FALSE) AND sys.To IS NOT NULL";
    let (ns, bytes) = measure(iterations / 20, || {
        SqlFilter::parse(black_box(text), &Parameters::new()).is_ok() as usize
    });
    println!("{ns:8.1} ns/parse {bytes:6.1} B/parse  compiling the compound filter");
}
