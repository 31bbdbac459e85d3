//! The JetStream transport: everything that talks to NATS, and nothing else — no
//! node logic, no joins, no delivery policy. The messenger composes these pieces.
//!
//! - [`mod@connect`] — [`Broker`]: one client + JetStream context; [`connect()`] bounded by 30 s
//!   (STREAM-7).
//! - [`streams`] — node and DLQ streams: create / update-if-differs / read back and compare
//!   (STREAM-1/2/3/7/8/14).
//! - [`durables`] — bind-or-create data, EOS and anchor durables with 503 retry
//!   (STREAM-4/5/6/7/15, T9); consumer observations that are Unknown, never zero (T11).
//! - [`subscription`] — [`Inbox`]: permit-before-fetch pull loops, bounded local queues,
//!   admission hook (PART-4, DELIV-16), automatic keepalive (DELIV-3), hand-back on close
//!   (DELIV-1).
//! - `pull` — one pull request read to its true end, late replicated deliveries included.
//! - [`delivery`] — [`Delivery`] and its [`DeliveryHandle`]: ack-sync / nak / term /
//!   in_progress / retire, each resolving at most once (DELIV-1).
//! - [`publish`] — [`Publisher`]: `Nats-Msg-Id` + `VF-Env: 4`, REALTIME / BATCH / ABORT rules
//!   (DELIV-4/5, ABORT-2, MSGID-1, WIRE-2).
//! - [`dlq`] — dead letters with DELIV-8's exact headers and id.
//! - [`control`] — [`StopFlag`], the control subscription and the stop sender (CTRL-1).
//! - [`error`] — [`BrokerError`]: stable codes, 1.0.4's texts, into `VfError`.
//!
//! Every queue, channel and wait here is bounded; a read that fails is reported, never
//! coerced to "nothing there".

mod compare;
pub mod connect;
pub mod control;
pub mod delivery;
pub mod dlq;
pub mod durables;
pub mod error;
mod held;
pub mod publish;
mod pull;
pub mod streams;
pub mod subscription;

pub use connect::{Broker, connect, connect_within};
pub use control::{
    ControlSubscription, STOP_REASON_CONTROL, StopFlag, send_control_stop, subscribe_control,
};
pub use delivery::{Delivery, DeliveryHandle, DeliveryKind, Settlement};
pub use dlq::{DeadLetter, DeadLetterOutcome, publish_dead_letter};
pub use durables::{
    BoundDurable, ConsumerCounts, DurableKind, DurableRequest, bind_data_durable, bind_or_create,
    create_eos_durable, ensure_eos_anchor, observe_consumer,
};
pub use error::{BrokerError, ResourceKind};
pub use held::keepalive_period;
pub use publish::{InFlight, Publication, PublishMode, PublishOutcome, Publisher};
pub use streams::{
    EnsureAction, EnsuredStream, StreamRequest, ensure_aged_node_stream, ensure_dlq_stream,
    ensure_node_stream, ensure_stream,
};
pub use subscription::{
    Admission, AdmissionFilter, Admit, Inbox, InboxConfig, SkipHook, SubscriptionSpec,
};
