//! The command line: every command, its flags and its `--help` (clap derive). [`Command`] is
//! what a binary embeds as its subcommands; each command flattens [`Global`] (connection and
//! output flags, accepted anywhere after the command's name).

use std::path::PathBuf;

use clap::{Args, Subcommand};

use crate::connection::EMULATOR_CONNECTION_STRING;
use crate::output::Format;

/// The flags every command takes: where the namespace is, how to trust it, how to print.
#[derive(Debug, Clone, Args)]
#[command(next_help_heading = "Connection and output")]
pub struct Global {
    /// The namespace's connection string (Endpoint, SharedAccessKeyName, SharedAccessKey or
    /// SharedAccessSignature, UseDevelopmentEmulator). Default: the emulator's, which ironbus
    /// accepts on localhost.
    #[arg(
        long,
        env = "SERVICEBUS_CONNECTION_STRING",
        global = true,
        hide_env_values = true,
        hide_default_value = true,
        default_value = EMULATOR_CONNECTION_STRING
    )]
    pub connection_string: String,
    /// The management (ATOM) endpoint, e.g. `https://localhost:5301`. Default: http on port
    /// 5300 with UseDevelopmentEmulator=true, else https on 443.
    #[arg(long, global = true, value_name = "URL")]
    pub http_endpoint: Option<String>,
    /// Trust the CA certificates in this PEM file (e.g. ironbus's `<data-dir>/tls/ca.pem`)
    /// instead of the public CAs.
    #[arg(long, global = true, value_name = "PEM")]
    pub ca_file: Option<PathBuf>,
    /// Do not verify the broker's TLS certificate (anyone on the path can read the traffic).
    #[arg(long, global = true)]
    pub insecure: bool,
    /// How to print results: human tables, or one JSON document for scripts.
    #[arg(long, short = 'o', global = true, value_enum, default_value_t = Format::Table)]
    pub output: Format,
}

/// The operator commands: `ironbus <command> ...`.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Every queue, topic and subscription with its message counts, size and status.
    #[command(
        visible_alias = "ns",
        after_help = "Examples:\n  ironbus overview\n  ironbus ns --output json"
    )]
    Overview(Overview),
    /// Counts and their rates, refreshed in place (one line per refresh when not a terminal).
    #[command(
        after_help = "Ends on Ctrl-C or after --iterations. With --output json: one JSON document per line.\n\nExamples:\n  ironbus watch\n  ironbus watch --interval 5 --iterations 12 >> counts.log"
    )]
    Watch(Watch),
    /// List, show, create, update or delete queues.
    Queue(EntityCommand<QueueAction>),
    /// List, show, create, update or delete topics.
    Topic(EntityCommand<TopicAction>),
    /// List, show, create, update or delete the subscriptions of a topic.
    Subscription(EntityCommand<SubscriptionAction>),
    /// List, show, create, update or delete the rules (filters and actions) of a subscription.
    Rule(EntityCommand<RuleAction>),
    /// Send messages to a queue or topic.
    #[command(
        after_help = "Examples:\n  ironbus send orders 'hello'\n  ironbus send orders --file order.json --content-type application/json --property region=eu\n  echo hi | ironbus send events --subject greeting --repeat 10\n  ironbus send orders later --schedule 2030-01-01T00:00:00Z"
    )]
    Send(Send),
    /// Look at messages without locking or removing them.
    #[command(
        after_help = "Examples:\n  ironbus peek orders --count 20\n  ironbus peek events/Subscriptions/all --dead-letter\n  ironbus peek orders --from-sequence 100 --output json"
    )]
    Peek(Peek),
    /// Receive messages: lock them, then complete, abandon, defer or dead-letter them.
    #[command(
        after_help = "Examples:\n  ironbus receive orders --count 5\n  ironbus receive orders --then dead-letter --reason bad-input\n  ironbus receive orders --delete --timeout 2"
    )]
    Receive(Receive),
    /// Cancel scheduled messages by their sequence numbers (as `send --schedule` prints them).
    #[command(
        name = "cancel-scheduled",
        after_help = "Example:\n  ironbus cancel-scheduled orders 12 13"
    )]
    CancelScheduled(CancelScheduled),
    /// Delete every message of a queue or subscription (or its dead letters, or its scheduled
    /// messages).
    #[command(
        after_help = "Asks for confirmation on a terminal; without one, --yes is required.\n\nExamples:\n  ironbus purge orders\n  ironbus purge orders --dead-letter --yes"
    )]
    Purge(Purge),
    /// List and resubmit dead-lettered messages.
    #[command(name = "dead-letter")]
    DeadLetter(DeadLetterCommand),
    /// List the sessions of a session-enabled queue or subscription; show or set their state.
    #[command(
        after_help = "Examples:\n  ironbus session list orders\n  ironbus session show orders customer-7\n  ironbus session set-state orders customer-7 '{\"step\":2}'\n  ironbus session set-state orders customer-7 --clear"
    )]
    Session(SessionCommand),
    /// Write the namespace's entities as the emulator's config.json (what `--config` reads).
    #[command(
        after_help = "Examples:\n  ironbus export > config.json\n  ironbus export --file config.json"
    )]
    Export(Export),
    /// Apply a config.json to the namespace: create what is missing, update what differs.
    #[command(
        after_help = "Idempotent: a second run changes nothing. Properties fixed at creation \
(RequiresSession, RequiresDuplicateDetection, EnablePartitioning, PartitionCount) are reported \
when they differ, not changed; entities not in the file are left alone.\n\nExample:\n  ironbus import config.json"
    )]
    Import(Import),
}

/// `export`.
#[derive(Debug, Args)]
pub struct Export {
    /// Write to this file (default: stdout).
    #[arg(long)]
    pub file: Option<PathBuf>,
    #[command(flatten)]
    pub global: Global,
}

/// `import`.
#[derive(Debug, Args)]
pub struct Import {
    /// The config.json to apply.
    pub file: PathBuf,
    #[command(flatten)]
    pub global: Global,
}

/// `watch`.
#[derive(Debug, Args)]
pub struct Watch {
    /// Seconds between refreshes.
    #[arg(long, default_value_t = 2)]
    pub interval: u64,
    /// Stop after this many refreshes (default: until Ctrl-C).
    #[arg(long)]
    pub iterations: Option<u64>,
    #[command(flatten)]
    pub global: Global,
}

/// `overview`.
#[derive(Debug, Args)]
pub struct Overview {
    #[command(flatten)]
    pub global: Global,
}

/// A family of entity commands: the global flags, then the action.
#[derive(Debug, Args)]
pub struct EntityCommand<A: Subcommand> {
    #[command(subcommand)]
    pub action: A,
    #[command(flatten)]
    pub global: Global,
}

/// `queue <action>`.
#[derive(Debug, Subcommand)]
pub enum QueueAction {
    /// List the queues with their counts.
    List,
    /// Show one queue's properties and counts.
    Show {
        /// The queue's name.
        name: String,
    },
    /// Create a queue.
    #[command(
        after_help = "Examples:\n  ironbus queue create orders --max-delivery-count 5 --lock-duration 1m\n  ironbus queue create jobs --partitioned --partitions 4 --duplicate-detection --duplicate-window 10m"
    )]
    Create {
        /// The queue's name.
        name: String,
        #[command(flatten)]
        options: QueueOptions,
    },
    /// Change a queue's properties (only those given).
    #[command(
        after_help = "Durations: 30s, 5m, 2h, 7d or ISO 8601 (PT1M). Flags shown with [<BOOL>] take an optional true or false.\n\nExample:\n  ironbus queue update orders --max-delivery-count 10 --ttl 7d"
    )]
    Update {
        /// The queue's name.
        name: String,
        #[command(flatten)]
        options: QueueOptions,
    },
    /// Delete a queue and its messages.
    Delete {
        /// The queue's name.
        name: String,
    },
}

/// `topic <action>`.
#[derive(Debug, Subcommand)]
pub enum TopicAction {
    /// List the topics.
    List,
    /// Show one topic's properties.
    Show {
        /// The topic's name.
        name: String,
    },
    /// Create a topic.
    #[command(
        after_help = "Durations: 30s, 5m, 2h, 7d or ISO 8601 (PT1M). Flags shown with [<BOOL>] take an optional true or false.\n\nExample:\n  ironbus topic create events --ttl 1d --duplicate-detection"
    )]
    Create {
        /// The topic's name.
        name: String,
        #[command(flatten)]
        options: TopicOptions,
    },
    /// Change a topic's properties (only those given).
    #[command(
        after_help = "Durations: 30s, 5m, 2h, 7d or ISO 8601 (PT1M). Flags shown with [<BOOL>] take an optional true or false."
    )]
    Update {
        /// The topic's name.
        name: String,
        #[command(flatten)]
        options: TopicOptions,
    },
    /// Delete a topic, its subscriptions and their messages.
    Delete {
        /// The topic's name.
        name: String,
    },
}

/// `subscription <action>`.
#[derive(Debug, Subcommand)]
pub enum SubscriptionAction {
    /// List a topic's subscriptions with their counts.
    List {
        /// The topic.
        topic: String,
    },
    /// Show one subscription's properties and counts.
    Show {
        /// The topic.
        topic: String,
        /// The subscription's name.
        name: String,
    },
    /// Create a subscription (it gets the `$Default` rule, which takes every message).
    #[command(
        after_help = "Durations: 30s, 5m, 2h, 7d or ISO 8601 (PT1M). Flags shown with [<BOOL>] take an optional true or false.\n\nExample:\n  ironbus subscription create events audit --max-delivery-count 5 --forward-to audit-log"
    )]
    Create {
        /// The topic.
        topic: String,
        /// The subscription's name.
        name: String,
        #[command(flatten)]
        options: SubscriptionOptions,
    },
    /// Change a subscription's properties (only those given).
    #[command(
        after_help = "Durations: 30s, 5m, 2h, 7d or ISO 8601 (PT1M). Flags shown with [<BOOL>] take an optional true or false."
    )]
    Update {
        /// The topic.
        topic: String,
        /// The subscription's name.
        name: String,
        #[command(flatten)]
        options: SubscriptionOptions,
    },
    /// Delete a subscription and its messages.
    Delete {
        /// The topic.
        topic: String,
        /// The subscription's name.
        name: String,
    },
}

/// Properties of a queue (create: defaults where not given; update: only those given).
/// Durations: `30s`, `5m`, `2h`, `7d` or ISO 8601 (`PT1M`). Flags take an optional
/// `true`/`false` (`--sessions` is `--sessions true`).
#[derive(Debug, Clone, Default, Args)]
pub struct QueueOptions {
    #[command(flatten)]
    pub partitioning: PartitionOptions,
    #[command(flatten)]
    pub delivery: DeliveryOptions,
    #[command(flatten)]
    pub duplicates: DuplicateOptions,
    #[command(flatten)]
    pub common: CommonOptions,
}

/// Properties of a topic (create: defaults where not given; update: only those given).
#[derive(Debug, Clone, Default, Args)]
pub struct TopicOptions {
    #[command(flatten)]
    pub partitioning: PartitionOptions,
    #[command(flatten)]
    pub duplicates: DuplicateOptions,
    #[command(flatten)]
    pub common: CommonOptions,
}

/// Properties of a subscription (create: defaults where not given; update: only those given).
#[derive(Debug, Clone, Default, Args)]
pub struct SubscriptionOptions {
    #[command(flatten)]
    pub delivery: DeliveryOptions,
    /// Default time to live of messages.
    #[arg(long, value_name = "DURATION")]
    pub ttl: Option<String>,
    /// Active, Disabled, SendDisabled or ReceiveDisabled.
    #[arg(long)]
    pub status: Option<String>,
}

/// Partitioning, of queues and topics.
#[derive(Debug, Clone, Default, Args)]
pub struct PartitionOptions {
    /// Spread the entity over partitions (fixed at creation).
    #[arg(long, num_args = 0..=1, default_missing_value = "true", value_name = "BOOL")]
    pub partitioned: Option<bool>,
    /// How many partitions (ironbus extension; with --partitioned).
    #[arg(long, value_name = "N")]
    pub partitions: Option<u32>,
}

/// Duplicate detection, of queues and topics.
#[derive(Debug, Clone, Default, Args)]
pub struct DuplicateOptions {
    /// Drop duplicates by MessageId (fixed at creation).
    #[arg(long, num_args = 0..=1, default_missing_value = "true", value_name = "BOOL")]
    pub duplicate_detection: Option<bool>,
    /// How long MessageIds are remembered for duplicate detection.
    #[arg(long, value_name = "DURATION")]
    pub duplicate_window: Option<String>,
}

/// How messages are delivered, of queues and subscriptions.
#[derive(Debug, Clone, Default, Args)]
pub struct DeliveryOptions {
    /// Require sessions (fixed at creation).
    #[arg(long, num_args = 0..=1, default_missing_value = "true", value_name = "BOOL")]
    pub sessions: Option<bool>,
    /// Deliveries before a message is dead-lettered.
    #[arg(long, value_name = "N")]
    pub max_delivery_count: Option<u32>,
    /// How long a received message stays locked.
    #[arg(long, value_name = "DURATION")]
    pub lock_duration: Option<String>,
    /// Dead-letter messages that expire (instead of dropping them).
    #[arg(long, num_args = 0..=1, default_missing_value = "true", value_name = "BOOL")]
    pub dead_letter_on_expiry: Option<bool>,
    /// Forward every message to this queue or topic (empty: stop forwarding).
    #[arg(long, value_name = "ENTITY")]
    pub forward_to: Option<String>,
    /// Forward dead-lettered messages to this queue or topic (empty: stop).
    #[arg(long, value_name = "ENTITY")]
    pub forward_dead_letters_to: Option<String>,
}

/// What queues and topics share besides: time to live, size, status.
#[derive(Debug, Clone, Default, Args)]
pub struct CommonOptions {
    /// Default time to live of messages.
    #[arg(long, value_name = "DURATION")]
    pub ttl: Option<String>,
    /// Largest total size in megabytes.
    #[arg(long, value_name = "MB")]
    pub max_size_mb: Option<u64>,
    /// Active, Disabled, SendDisabled or ReceiveDisabled.
    #[arg(long)]
    pub status: Option<String>,
}

/// `send`.
#[derive(Debug, Args)]
pub struct Send {
    /// The queue or topic.
    pub entity: String,
    /// The body; without it (and without --file) the body is read from stdin.
    pub body: Option<String>,
    /// Read the body from this file.
    #[arg(long, conflicts_with = "body")]
    pub file: Option<PathBuf>,
    /// The body's content type (e.g. application/json).
    #[arg(long)]
    pub content_type: Option<String>,
    /// The subject (label).
    #[arg(long)]
    pub subject: Option<String>,
    /// The MessageId (default: a fresh one per message).
    #[arg(long)]
    pub message_id: Option<String>,
    /// The CorrelationId.
    #[arg(long)]
    pub correlation_id: Option<String>,
    /// The SessionId (required by session-enabled entities).
    #[arg(long)]
    pub session_id: Option<String>,
    /// The PartitionKey.
    #[arg(long)]
    pub partition_key: Option<String>,
    /// An application property `key=value` (repeatable). Integers, `true` and `false` are
    /// sent typed; quote a value in `"` to send it as a string.
    #[arg(long = "property", value_name = "KEY=VALUE")]
    pub properties: Vec<String>,
    /// Enqueue at this time (RFC 3339, e.g. 2030-01-01T00:00:00Z) instead of now.
    #[arg(long, value_name = "TIME")]
    pub schedule: Option<String>,
    /// Send the message this many times.
    #[arg(long, default_value_t = 1, value_name = "N")]
    pub repeat: u32,
    #[command(flatten)]
    pub global: Global,
}

/// Which sub-queue of an entity.
#[derive(Debug, Clone, Copy, Default, Args)]
pub struct SubQueue {
    /// The entity's dead-letter queue.
    #[arg(long, conflicts_with = "transfer")]
    pub dead_letter: bool,
    /// The entity's transfer dead-letter queue (messages that could not be forwarded).
    #[arg(long)]
    pub transfer: bool,
}

/// `peek`.
#[derive(Debug, Args)]
pub struct Peek {
    /// The queue or subscription (`topic/Subscriptions/name`).
    pub entity: String,
    /// How many messages at most.
    #[arg(long, short = 'n', default_value_t = 10)]
    pub count: u32,
    /// Start at this sequence number.
    #[arg(long, value_name = "SEQ", default_value_t = 0)]
    pub from_sequence: i64,
    #[command(flatten)]
    pub sub_queue: SubQueue,
    /// Only this session's messages.
    #[arg(long, value_name = "ID")]
    pub session: Option<String>,
    /// Print bodies in full (the table shows the first 60 characters).
    #[arg(long)]
    pub full: bool,
    #[command(flatten)]
    pub global: Global,
}

/// What to do with a received message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Settle {
    /// Remove it.
    Complete,
    /// Give it back (its delivery count goes up).
    Abandon,
    /// Set it aside; it can be received by sequence number only.
    Defer,
    /// Move it to the dead-letter queue.
    DeadLetter,
}

/// `receive`.
#[derive(Debug, Args)]
pub struct Receive {
    /// The queue or subscription (`topic/Subscriptions/name`).
    pub entity: String,
    /// How many messages at most.
    #[arg(long, short = 'n', default_value_t = 1)]
    pub count: u32,
    /// Seconds to wait for a message before stopping.
    #[arg(long, default_value_t = 5)]
    pub timeout: u64,
    /// What to do with each message once locked.
    #[arg(long, value_enum, default_value_t = Settle::Complete)]
    pub then: Settle,
    /// Receive and delete at once (no lock; --then does not apply).
    #[arg(long, conflicts_with = "then")]
    pub delete: bool,
    /// With --then dead-letter: the DeadLetterReason.
    #[arg(long)]
    pub reason: Option<String>,
    /// With --then dead-letter: the DeadLetterErrorDescription.
    #[arg(long)]
    pub description: Option<String>,
    #[command(flatten)]
    pub sub_queue: SubQueue,
    /// Receive from this session (session-enabled entities).
    #[arg(long, value_name = "ID")]
    pub session: Option<String>,
    /// Receive from the next session that has messages and no receiver (session-enabled
    /// entities; the broker picks it).
    #[arg(long, conflicts_with = "session")]
    pub next_session: bool,
    /// Print bodies in full (the table shows the first 60 characters).
    #[arg(long)]
    pub full: bool,
    #[command(flatten)]
    pub global: Global,
}

/// `cancel-scheduled`.
#[derive(Debug, Args)]
pub struct CancelScheduled {
    /// The queue or topic.
    pub entity: String,
    /// The sequence numbers of the scheduled messages.
    #[arg(required = true, value_name = "SEQ")]
    pub sequence_numbers: Vec<i64>,
    #[command(flatten)]
    pub global: Global,
}

/// `purge`.
#[derive(Debug, Args)]
pub struct Purge {
    /// The queue or subscription (`topic/Subscriptions/name`).
    pub entity: String,
    /// Purge the dead-letter queue instead.
    #[arg(long, conflicts_with = "scheduled")]
    pub dead_letter: bool,
    /// Cancel every scheduled message instead (a queue or topic).
    #[arg(long)]
    pub scheduled: bool,
    /// Do not ask for confirmation.
    #[arg(long, short = 'y')]
    pub yes: bool,
    #[command(flatten)]
    pub global: Global,
}

/// `dead-letter <action>`.
#[derive(Debug, Args)]
pub struct DeadLetterCommand {
    #[command(subcommand)]
    pub action: DeadLetterAction,
    #[command(flatten)]
    pub global: Global,
}

/// `dead-letter list|resubmit`.
#[derive(Debug, Subcommand)]
pub enum DeadLetterAction {
    /// List the dead-lettered messages with their DeadLetterReason and description.
    List {
        /// The queue or subscription.
        entity: String,
        /// How many messages at most.
        #[arg(long, short = 'n', default_value_t = 100)]
        count: u32,
    },
    /// Send copies of dead-lettered messages back to their entity (or another one).
    #[command(
        after_help = "A copy gets a fresh MessageId when the target detects duplicates.\n\nExamples:\n  ironbus dead-letter resubmit orders --remove\n  ironbus dead-letter resubmit orders --to orders-retry --count 10"
    )]
    Resubmit {
        /// The queue or subscription whose dead letters to resubmit.
        entity: String,
        /// Send to this queue or topic instead (default: the entity; for a subscription,
        /// its topic).
        #[arg(long, value_name = "ENTITY")]
        to: Option<String>,
        /// Remove each original from the dead-letter queue once its copy is sent.
        #[arg(long)]
        remove: bool,
        /// How many messages at most.
        #[arg(long, short = 'n', default_value_t = 1000)]
        count: u32,
    },
}

/// `session <action>`.
#[derive(Debug, Args)]
pub struct SessionCommand {
    #[command(subcommand)]
    pub action: SessionAction,
    #[command(flatten)]
    pub global: Global,
}

/// `session list|show|set-state`.
#[derive(Debug, Subcommand)]
pub enum SessionAction {
    /// List the sessions that have messages or a state.
    List {
        /// The queue or subscription (`topic/Subscriptions/name`).
        entity: String,
    },
    /// Show a session's state and how many messages it holds (locks the session meanwhile).
    Show {
        /// The queue or subscription.
        entity: String,
        /// The session's id.
        id: String,
    },
    /// Set (or clear) a session's state (locks the session meanwhile).
    SetState {
        /// The queue or subscription.
        entity: String,
        /// The session's id.
        id: String,
        /// The new state, as text.
        #[arg(conflicts_with_all = ["file", "clear"])]
        state: Option<String>,
        /// Read the new state from this file (any bytes).
        #[arg(long, conflicts_with = "clear")]
        file: Option<PathBuf>,
        /// Remove the state.
        #[arg(long)]
        clear: bool,
    },
}

/// `rule <action>`.
#[derive(Debug, Subcommand)]
pub enum RuleAction {
    /// List a subscription's rules.
    List {
        /// The topic.
        topic: String,
        /// The subscription.
        subscription: String,
    },
    /// Show one rule.
    Show {
        /// The topic.
        topic: String,
        /// The subscription.
        subscription: String,
        /// The rule's name.
        name: String,
    },
    /// Create a rule: a SQL filter (--sql) or a correlation filter (--correlation-*), and an
    /// optional SQL action.
    #[command(
        after_help = "Examples:\n  ironbus rule create events red only-red --sql \"color = 'red'\" --action \"SET seen = 1\"\n  ironbus rule create events eu by-region --correlation-subject order --correlation-property region=eu"
    )]
    Create {
        /// The topic.
        topic: String,
        /// The subscription.
        subscription: String,
        /// The rule's name.
        name: String,
        #[command(flatten)]
        rule: RuleOptions,
    },
    /// Change a rule's filter (when one is given) or action.
    Update {
        /// The topic.
        topic: String,
        /// The subscription.
        subscription: String,
        /// The rule's name.
        name: String,
        #[command(flatten)]
        rule: RuleOptions,
    },
    /// Delete a rule.
    Delete {
        /// The topic.
        topic: String,
        /// The subscription.
        subscription: String,
        /// The rule's name.
        name: String,
    },
}

/// A rule's filter and action.
#[derive(Debug, Clone, Default, Args)]
pub struct RuleOptions {
    /// A SQL filter, e.g. "color = 'red' AND quantity > 5".
    #[arg(long, value_name = "EXPRESSION")]
    pub sql: Option<String>,
    /// Correlation filter: the CorrelationId.
    #[arg(long, conflicts_with = "sql")]
    pub correlation_id: Option<String>,
    /// Correlation filter: the MessageId.
    #[arg(long, conflicts_with = "sql")]
    pub correlation_message_id: Option<String>,
    /// Correlation filter: To.
    #[arg(long, conflicts_with = "sql")]
    pub correlation_to: Option<String>,
    /// Correlation filter: ReplyTo.
    #[arg(long, conflicts_with = "sql")]
    pub correlation_reply_to: Option<String>,
    /// Correlation filter: the Subject (label).
    #[arg(long, conflicts_with = "sql")]
    pub correlation_subject: Option<String>,
    /// Correlation filter: the SessionId.
    #[arg(long, conflicts_with = "sql")]
    pub correlation_session_id: Option<String>,
    /// Correlation filter: ReplyToSessionId.
    #[arg(long, conflicts_with = "sql")]
    pub correlation_reply_to_session_id: Option<String>,
    /// Correlation filter: the ContentType.
    #[arg(long, conflicts_with = "sql")]
    pub correlation_content_type: Option<String>,
    /// Correlation filter: an application property `key=value` (repeatable; integers and
    /// true/false typed, "text" a string).
    #[arg(long = "correlation-property", value_name = "KEY=VALUE", conflicts_with = "sql")]
    pub correlation_properties: Vec<String>,
    /// A SQL action run on matching messages, e.g. "SET seen = 1" (update: empty removes it).
    #[arg(long, value_name = "EXPRESSION")]
    pub action: Option<String>,
}
