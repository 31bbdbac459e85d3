//! Built-in consumers: the reference's `CommandlineConsumer`, `VoidConsumer` and
//! `FileAppenderConsumer`, and our JSONL and keyed JSON sinks for self-checking tests.
//!
//! Every writing sink hands each record to the kernel in one `write` before `consume`
//! returns (no user-space buffer), so a SIGKILL after the ack never loses a written line.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::PathBuf;

use serde_json::json;
use videoflow_core::errors::{ErrorCode, VfError};

use super::context::{EnvelopeInfo, InputInfo};
use super::convert::{expect_inputs, input_py_str, input_to_json, io_error, value_to_json};
use super::params::Params;
use super::{Consumer, Input, NodeContext};
use crate::clock::wall_now;

/// `videoflow.consumers.basic.CommandlineConsumer`: `print(item, sep=sep, end=end)` — the
/// input's Python `str()` followed by `end` (`sep` only separates several items, and 1.0.4
/// prints one), flushed per record.
pub struct CommandlineConsumer {
    end: String,
    out: Box<dyn Write + Send>,
}

impl std::fmt::Debug for CommandlineConsumer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CommandlineConsumer")
            .field("end", &self.end)
            .finish_non_exhaustive()
    }
}

impl CommandlineConsumer {
    /// A printer writing to `out` instead of stdout (tests, embedding).
    pub fn with_writer(end: impl Into<String>, out: Box<dyn Write + Send>) -> Self {
        CommandlineConsumer {
            end: end.into(),
            out,
        }
    }

    pub(crate) fn from_params(p: &mut Params<'_>) -> Result<Self, VfError> {
        // Read so the reference's parameter is accepted; one item never needs a separator.
        p.string("sep", " ")?;
        let end = p.string("end", "\n")?;
        Ok(CommandlineConsumer::with_writer(
            end,
            Box::new(std::io::stdout()),
        ))
    }
}

impl Consumer for CommandlineConsumer {
    fn check_inputs(&self, parents: usize) -> Result<(), VfError> {
        expect_inputs("CommandlineConsumer", 1, parents)
    }

    fn consume(&mut self, _ctx: &mut NodeContext, inputs: &[Input]) -> Result<(), VfError> {
        expect_inputs("CommandlineConsumer", 1, inputs.len())?;
        let mut text = inputs.iter().map(input_py_str).collect::<String>();
        text.push_str(&self.end);
        self.out
            .write_all(text.as_bytes())
            .and_then(|()| self.out.flush())
            .map_err(|e| io_error("print", &e))
    }
}

/// `videoflow.consumers.basic.VoidConsumer`: ignores its one input.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct VoidConsumer;

impl Consumer for VoidConsumer {
    fn check_inputs(&self, parents: usize) -> Result<(), VfError> {
        expect_inputs("VoidConsumer", 1, parents)
    }

    fn consume(&mut self, _ctx: &mut NodeContext, inputs: &[Input]) -> Result<(), VfError> {
        expect_inputs("VoidConsumer", 1, inputs.len())
    }

    fn may_block(&self) -> bool {
        false
    }
}

/// `videoflow.consumers.basic.FileAppenderConsumer`: appends `f'{item}\n'` to `filepath`,
/// opening it per record as 1.0.4 does (created if missing; the folder must exist).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileAppenderConsumer {
    filepath: PathBuf,
}

impl FileAppenderConsumer {
    /// An appender to `filepath`.
    pub fn new(filepath: impl Into<PathBuf>) -> Self {
        FileAppenderConsumer {
            filepath: filepath.into(),
        }
    }

    pub(crate) fn from_params(p: &mut Params<'_>) -> Result<Self, VfError> {
        Ok(FileAppenderConsumer::new(p.required_string("filepath")?))
    }
}

impl Consumer for FileAppenderConsumer {
    fn check_inputs(&self, parents: usize) -> Result<(), VfError> {
        expect_inputs("FileAppenderConsumer", 1, parents)
    }

    fn consume(&mut self, _ctx: &mut NodeContext, inputs: &[Input]) -> Result<(), VfError> {
        let [input] = inputs else {
            return expect_inputs("FileAppenderConsumer", 1, inputs.len());
        };
        let line = format!("{}\n", input_py_str(input));
        let what = format!("appending to {}", self.filepath.display());
        OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.filepath)
            .and_then(|mut f| f.write_all(line.as_bytes()))
            .map_err(|e| io_error(&what, &e))
    }
}

/// `videoflow.rs.consumers.JsonlSink` (ours): appends one JSON object per group to `path`
/// (folders created) with `node`, `replica`, `trace_id`, `seq`, `event_ts` (the first
/// parent's envelope), `producer_replica` (the `replica_id` of the replica that published
/// that envelope: which replica of a competing or partitioned parent produced it),
/// `input_key`, `arrival_ts` (wall clock at consume), `value` (the one
/// input, or an array of them, ints and doubles kept apart; see
/// [`input_to_json`]) and, for several parents, `parents`
/// (`{name: {trace_id, seq, event_ts} | null}`). Tests read it back to check a whole flow.
#[derive(Debug)]
pub struct JsonlSink {
    path: PathBuf,
    file: Option<File>,
}

impl JsonlSink {
    /// A sink appending to `path`; the file is opened by `open`.
    pub fn new(path: impl Into<PathBuf>) -> Self {
        JsonlSink {
            path: path.into(),
            file: None,
        }
    }

    pub(crate) fn from_params(p: &mut Params<'_>) -> Result<Self, VfError> {
        Ok(JsonlSink::new(p.required_string("path")?))
    }

    /// The record written for one group (public so tests and tools share the layout).
    pub fn record(ctx: &NodeContext, inputs: &[Input], arrival_ts: f64) -> serde_json::Value {
        let first = ctx.first_envelope();
        let value = match inputs {
            [one] => input_to_json(one),
            many => many.iter().map(input_to_json).collect(),
        };
        let mut record = json!({
            "node": ctx.node_name,
            "replica": ctx.replica_id,
            "trace_id": first.map(|e| e.trace_id.clone()),
            "seq": first.map(|e| e.seq),
            "event_ts": first.and_then(|e| e.event_ts),
            "producer_replica": first.map(|e| e.replica_id),
            "input_key": ctx.input_key,
            "arrival_ts": arrival_ts,
            "value": value,
        });
        if ctx.input_info.len() > 1 {
            let parents: serde_json::Map<String, serde_json::Value> = ctx
                .input_info
                .iter()
                .map(|(name, info)| (name.clone(), parent_json(info.as_ref())))
                .collect();
            record["parents"] = serde_json::Value::Object(parents);
        }
        record
    }
}

fn envelope_json(e: &EnvelopeInfo) -> serde_json::Value {
    json!({"trace_id": e.trace_id, "seq": e.seq, "event_ts": e.event_ts})
}

/// A parent's entry: 1.0.4's shape, `null` trace id/seq and an `event_ts` list for a collect
/// parent, plus the metadata of each.
fn parent_json(info: Option<&InputInfo>) -> serde_json::Value {
    match info {
        None => serde_json::Value::Null,
        Some(InputInfo::Single(e)) => envelope_json(e),
        Some(InputInfo::Collected(items)) => json!({
            "trace_id": null,
            "seq": null,
            "event_ts": items.iter().map(|e| e.event_ts).collect::<Vec<_>>(),
            "metadata": items
                .iter()
                .map(|e| e.metadata.iter().map(|(k, v)| (k.clone(), value_to_json(v))).collect())
                .collect::<Vec<serde_json::Map<_, _>>>(),
        }),
    }
}

impl Consumer for JsonlSink {
    fn open(&mut self, _ctx: &mut NodeContext) -> Result<(), VfError> {
        let what = format!("opening {}", self.path.display());
        if let Some(dir) = self.path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|e| io_error(&what, &e))?;
        }
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.path)
            .map_err(|e| io_error(&what, &e))?;
        self.file = Some(file);
        Ok(())
    }

    fn consume(&mut self, ctx: &mut NodeContext, inputs: &[Input]) -> Result<(), VfError> {
        if self.file.is_none() {
            self.open(ctx)?;
        }
        let record = JsonlSink::record(ctx, inputs, wall_now());
        let mut line = record.to_string();
        line.push('\n');
        let what = format!("appending to {}", self.path.display());
        match self.file.as_mut() {
            Some(f) => f
                .write_all(line.as_bytes())
                .map_err(|e| io_error(&what, &e)),
            None => Ok(()),
        }
    }

    fn close(&mut self, _ctx: &mut NodeContext) -> Result<(), VfError> {
        self.file = None;
        Ok(())
    }
}

/// `videoflow.rs.consumers.KeyedJsonSink` (ours): the effect of each group is the file
/// `<dir>/<input_key>.json` holding its [`JsonlSink::record`], written under a temporary
/// name and renamed over the final one.
///
/// Why: an appending sink killed between its effect and the IDEM-1 mark applies that effect
/// again when the group is redelivered (consume → mark → ack). Keyed by the group's
/// `last_input_key`, the second application replaces the first instead of adding a record:
/// the effect itself is idempotent, as IDEM-1 asks of a sink that opts in, and a reader
/// counts each group once however often it was consumed. The rename makes each record
/// whole or absent, never half written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyedJsonSink {
    dir: PathBuf,
}

impl KeyedJsonSink {
    /// A sink writing one file per group into `dir`; the folder is created by `open`.
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        KeyedJsonSink { dir: dir.into() }
    }

    pub(crate) fn from_params(p: &mut Params<'_>) -> Result<Self, VfError> {
        Ok(KeyedJsonSink::new(p.required_string("dir")?))
    }
}

impl Consumer for KeyedJsonSink {
    fn open(&mut self, _ctx: &mut NodeContext) -> Result<(), VfError> {
        let what = format!("creating {}", self.dir.display());
        std::fs::create_dir_all(&self.dir).map_err(|e| io_error(&what, &e))
    }

    fn consume(&mut self, ctx: &mut NodeContext, inputs: &[Input]) -> Result<(), VfError> {
        // The key is a message id (32 hex characters, MSGID-1): a plain file name.
        let key = ctx
            .input_key
            .clone()
            .filter(|k| !k.is_empty() && k.bytes().all(|b| b.is_ascii_alphanumeric()))
            .ok_or_else(|| {
                VfError::new(
                    ErrorCode::NodeContract,
                    "KeyedJsonSink needs the group's input key (a consumer always has one).",
                )
            })?;
        let record = JsonlSink::record(ctx, inputs, wall_now());
        let staged = self.dir.join(format!(".{key}.{}.tmp", std::process::id()));
        let path = self.dir.join(format!("{key}.json"));
        let what = format!("writing {}", path.display());
        std::fs::write(&staged, record.to_string())
            .and_then(|()| std::fs::rename(&staged, &path))
            .map_err(|e| io_error(&what, &e))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use videoflow_core::envelope::Payload;
    use videoflow_core::value::Value;

    use super::*;

    /// A writer tests can read back.
    #[derive(Clone, Default)]
    struct Shared(Arc<Mutex<Vec<u8>>>);

    impl Write for Shared {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            match self.0.lock() {
                Ok(mut v) => {
                    v.extend_from_slice(buf);
                    Ok(buf.len())
                }
                Err(_) => Err(std::io::Error::other("poisoned")),
            }
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn commandline_prints_python_str_with_end() {
        let buf = Shared::default();
        let mut c = CommandlineConsumer::with_writer("|", Box::new(buf.clone()));
        let mut ctx = NodeContext::default();
        let items = [
            Value::List(vec![Value::Int(1), Value::Double(2.0)]),
            Value::from("x"),
            Value::Null,
            Value::Bool(false),
        ];
        for v in items {
            assert_eq!(
                c.consume(&mut ctx, &[Input::Present(Payload::Value(v))]),
                Ok(())
            );
        }
        let text = buf.0.lock().map(|v| v.clone()).unwrap_or_default();
        assert_eq!(String::from_utf8_lossy(&text), "[1, 2.0]|x|None|False|");
    }

    #[test]
    fn idem_1_a_keyed_sink_replaces_the_effect_of_a_group_consumed_again() {
        let dir = std::env::temp_dir().join(format!("vf-keyed-sink-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let mut sink = KeyedJsonSink::new(&dir);
        let mut ctx = NodeContext::default();
        assert_eq!(sink.open(&mut ctx), Ok(()));
        let group = |v: i64| [Input::Present(Payload::Value(Value::Int(v)))];
        for (key, v) in [("aa11", 1), ("bb22", 2), ("aa11", 1)] {
            ctx.begin_group(Some(key.to_owned()), Vec::new());
            assert_eq!(sink.consume(&mut ctx, &group(v)), Ok(()));
        }
        let mut files: Vec<String> = std::fs::read_dir(&dir)
            .map(|d| {
                d.flatten()
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default();
        files.sort();
        assert_eq!(files, ["aa11.json", "bb22.json"], "one effect per group");
        let record: serde_json::Value = std::fs::read_to_string(dir.join("aa11.json"))
            .ok()
            .and_then(|t| serde_json::from_str(&t).ok())
            .unwrap_or_default();
        assert_eq!(record["value"], 1);
        assert_eq!(record["input_key"], "aa11");
        // A group without a usable key is refused, never written under a made-up name.
        ctx.begin_group(Some("../x".to_owned()), Vec::new());
        assert!(sink.consume(&mut ctx, &group(3)).is_err());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
