//! `watch`: the namespace's counts and their rates of change, read again every `--interval`
//! seconds until Ctrl-C (or `--iterations`). On a terminal the table is redrawn in place;
//! otherwise each refresh is one line of totals (one JSON document per line with `--output
//! json`, `schema/watch.json`).

use std::collections::HashMap;
use std::time::{Duration, Instant};

use serde_json::json;

use crate::args::Watch;
use crate::error::{CliError, Result};
use crate::output::{self, Format, Table};
use crate::time::{format_rfc3339, now_millis};
use crate::view::Counts;
use crate::Target;

use super::overview::Namespace;

/// Runs `watch`.
pub(crate) async fn run(target: &Target, args: &Watch) -> Result<()> {
    if args.interval == 0 {
        return Err(CliError::usage("--interval must be at least 1 second"));
    }
    let management = target.management();
    let in_place = target.format == Format::Table && output::stdout_is_terminal();
    let mut previous: Option<(Instant, HashMap<String, Counts>)> = None;
    let mut done = 0u64;
    loop {
        let namespace = Namespace::read(&management).await?;
        let now = Instant::now();
        let counts: HashMap<String, Counts> =
            namespace.views().iter().map(|v| (v.path.clone(), Counts::of(v.entry))).collect();
        let elapsed = previous.as_ref().map(|(at, _)| now.duration_since(*at).as_secs_f64());
        let rate = |path: &str, pick: fn(&Counts) -> u64| -> Option<f64> {
            let (_, before) = previous.as_ref()?;
            let old = pick(before.get(path)?) as f64;
            let new = pick(counts.get(path)?) as f64;
            Some((new - old) / elapsed?.max(0.001))
        };
        let total = |pick: fn(&Counts) -> u64| counts.values().map(pick).sum::<u64>();
        let total_rate = |pick: fn(&Counts) -> u64| -> Option<f64> {
            let (_, before) = previous.as_ref()?;
            let old: u64 = before.values().map(pick).sum();
            Some((total(pick) as f64 - old as f64) / elapsed?.max(0.001))
        };
        let stamp = format_rfc3339(now_millis());
        if in_place {
            let mut table = Table::new(&[
                "NAME",
                ">ACTIVE",
                ">ACTIVE/S",
                ">DEAD",
                ">DEAD/S",
                ">SCHEDULED",
                ">TRANSFER",
            ]);
            for view in namespace.views() {
                let c = Counts::of(view.entry);
                table.row(vec![
                    view.path.clone(),
                    c.active.to_string(),
                    shown(rate(&view.path, |c| c.active)),
                    c.dead_letter.to_string(),
                    shown(rate(&view.path, |c| c.dead_letter)),
                    c.scheduled.to_string(),
                    (c.transfer + c.transfer_dead_letter).to_string(),
                ]);
            }
            output::redraw(&format!(
                "{stamp}  every {}s  (Ctrl-C stops)\n\n{}",
                args.interval,
                table.render()
            ));
        } else if target.format == Format::Json {
            let line = json!({
                "time": stamp,
                "entities": counts.len(),
                "active": total(|c| c.active),
                "dead_letter": total(|c| c.dead_letter),
                "scheduled": total(|c| c.scheduled),
                "transfer": total(|c| c.transfer + c.transfer_dead_letter),
                "active_per_second": total_rate(|c| c.active),
                "dead_letter_per_second": total_rate(|c| c.dead_letter),
            });
            output::line(&line.to_string());
        } else {
            output::line(&format!(
                "{stamp} entities={} active={} active/s={} dead={} dead/s={} scheduled={} transfer={}",
                counts.len(),
                total(|c| c.active),
                shown(total_rate(|c| c.active)),
                total(|c| c.dead_letter),
                shown(total_rate(|c| c.dead_letter)),
                total(|c| c.scheduled),
                total(|c| c.transfer + c.transfer_dead_letter),
            ));
        }
        previous = Some((now, counts));
        done += 1;
        if args.iterations.is_some_and(|n| done >= n) {
            return Ok(());
        }
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_secs(args.interval)) => {}
            _ = tokio::signal::ctrl_c() => return Ok(()),
        }
    }
}

/// A rate for people: `+1.5`, `-3.0`, `-` before the second reading.
fn shown(rate: Option<f64>) -> String {
    match rate {
        Some(r) => format!("{r:+.1}"),
        None => "-".to_owned(),
    }
}
