//! One module per command family; [`run`] picks the one a [`Command`] names.

mod config;
mod dead_letter;
mod entities;
mod messages;
mod overview;
mod purge;
mod rules;
mod sessions;
mod watch;

use crate::args::Command;
use crate::error::Result;
use crate::Target;

/// Runs `command`.
pub(crate) async fn run(command: Command) -> Result<()> {
    match command {
        Command::Overview(c) => overview::run(&Target::new(&c.global)?).await,
        Command::Watch(c) => watch::run(&Target::new(&c.global)?, &c).await,
        Command::Queue(c) => entities::queue(&Target::new(&c.global)?, c.action).await,
        Command::Topic(c) => entities::topic(&Target::new(&c.global)?, c.action).await,
        Command::Subscription(c) => {
            entities::subscription(&Target::new(&c.global)?, c.action).await
        }
        Command::Rule(c) => rules::run(&Target::new(&c.global)?, c.action).await,
        Command::Send(c) => messages::send(&Target::new(&c.global)?, &c).await,
        Command::Peek(c) => messages::peek(&Target::new(&c.global)?, &c).await,
        Command::Receive(c) => messages::receive(&Target::new(&c.global)?, &c).await,
        Command::CancelScheduled(c) => {
            messages::cancel_scheduled(&Target::new(&c.global)?, &c).await
        }
        Command::Purge(c) => purge::run(&Target::new(&c.global)?, &c).await,
        Command::DeadLetter(c) => dead_letter::run(&Target::new(&c.global)?, c.action).await,
        Command::Session(c) => sessions::run(&Target::new(&c.global)?, c.action).await,
        Command::Export(c) => config::export(&Target::new(&c.global)?, &c).await,
        Command::Import(c) => config::import(&Target::new(&c.global)?, &c).await,
    }
}
