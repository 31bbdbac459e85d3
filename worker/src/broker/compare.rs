//! Read-back comparison (STREAM-14): the requested fields the effective configuration does
//! not honour, rendered the way 1.0.4 renders them.
//!
//! Why render like Python: the mismatch list is the IncompatibleProfile message, which an
//! operator compares across a mixed fleet; `retention: requested 'limits', effective
//! 'interest'` must read the same from either implementation. Requested durations are whole
//! seconds (Python ints), effective ones are what the client reads back (Python floats).

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use videoflow_core::partition::{py_float, py_repr_str};

/// Python `repr` of a string list: `['a', 'b']`.
pub(crate) fn repr_list(items: &[String]) -> String {
    let inner: Vec<String> = items.iter().map(|s| py_repr_str(s)).collect();
    format!("[{}]", inner.join(", "))
}

/// Python `repr` of a string dict, keys sorted (deterministic): `{'k': 'v'}`.
pub(crate) fn repr_map<'a>(pairs: impl IntoIterator<Item = (&'a String, &'a String)>) -> String {
    let sorted: BTreeMap<&String, &String> = pairs.into_iter().collect();
    let inner: Vec<String> = sorted
        .into_iter()
        .map(|(k, v)| format!("{}: {}", py_repr_str(k), py_repr_str(v)))
        .collect();
    format!("{{{}}}", inner.join(", "))
}

/// A requested duration as the Python request holds it: whole seconds as an int.
pub(crate) fn repr_requested_secs(d: Duration) -> String {
    if d.subsec_nanos() == 0 {
        d.as_secs().to_string()
    } else {
        py_float(d.as_secs_f64())
    }
}

/// An effective duration as the Python client reads it back: seconds as a float.
pub(crate) fn repr_effective_secs(d: Duration) -> String {
    py_float(d.as_secs_f64())
}

/// Collects mismatches field by field.
#[derive(Debug, Default)]
pub(crate) struct Mismatches(Vec<String>);

impl Mismatches {
    /// Records `<field>: requested <want>, effective <got>` when the rendered values differ.
    pub(crate) fn field(&mut self, field: &str, want: String, got: String) {
        if want != got {
            self.0
                .push(format!("{field}: requested {want}, effective {got}"));
        }
    }

    /// Records a requested duration that reads back different.
    pub(crate) fn duration(&mut self, field: &str, want: Duration, got: Duration) {
        if want != got {
            self.0.push(format!(
                "{field}: requested {}, effective {}",
                repr_requested_secs(want),
                repr_effective_secs(got)
            ));
        }
    }

    /// Metadata is a subset check: every requested pair must be carried (server-added
    /// `_nats.*` keys are ignored by construction).
    pub(crate) fn metadata(
        &mut self,
        want: &BTreeMap<String, String>,
        got: &HashMap<String, String>,
    ) {
        let missing: Vec<(&String, &String)> = want
            .iter()
            .filter(|(k, v)| got.get(*k) != Some(*v))
            .collect();
        if !missing.is_empty() {
            self.0.push(format!(
                "metadata: requested {} not carried by the broker (effective {})",
                repr_map(missing),
                repr_map(got.iter())
            ));
        }
    }

    /// The rendered list, in field order.
    pub(crate) fn into_vec(self) -> Vec<String> {
        self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn python_reprs() {
        assert_eq!(repr_list(&["a".into(), "b.c".into()]), "['a', 'b.c']");
        assert_eq!(repr_requested_secs(Duration::from_secs(60)), "60");
        assert_eq!(repr_effective_secs(Duration::from_secs(60)), "60.0");
        let mut m = Mismatches::default();
        m.field("retention", "'limits'".into(), "'interest'".into());
        m.field("max_msgs", "1".into(), "1".into());
        m.duration(
            "duplicate_window",
            Duration::from_secs(120),
            Duration::from_secs(60),
        );
        let want = BTreeMap::from([("videoflow.io/run-id".to_owned(), "r1".to_owned())]);
        let got = HashMap::from([("videoflow.io/run-id".to_owned(), "r2".to_owned())]);
        m.metadata(&want, &got);
        assert_eq!(
            m.into_vec(),
            vec![
                "retention: requested 'limits', effective 'interest'",
                "duplicate_window: requested 120, effective 60.0",
                "metadata: requested {'videoflow.io/run-id': 'r1'} not carried by the broker \
                 (effective {'videoflow.io/run-id': 'r2'})",
            ]
        );
    }
}
