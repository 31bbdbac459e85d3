//! The readers every `VF_*` parser is built from: Python's `int()` and `float()` as 1.0.4
//! applies them, comma lists, typed accessors over the variable map, float rules with the
//! reference's exact texts, and seconds turned into a [`Duration`] without a panic.
//!
//! Why here and only here: each variable's failure must be a `VF_CONFIG` error naming the
//! variable and its value (ENV-1), so every sub-config uses the same few constructors.

use std::collections::BTreeMap;
use std::time::Duration;

use videoflow_core::errors::{ErrorCode, VfError};
use videoflow_core::partition::py_repr_str;

/// Python `int()` of a string: surrounding whitespace, an optional sign, ASCII digits with
/// single `_` only between digits. `None` when `int()` would refuse it; values beyond i128
/// also give `None`.
pub fn py_int(text: &str) -> Option<i128> {
    let t = text.trim();
    let (negative, digits) = match t.as_bytes().first() {
        Some(b'-') => (true, &t[1..]),
        Some(b'+') => (false, &t[1..]),
        _ => (false, t),
    };
    if !underscores_between_digits(digits) {
        return None;
    }
    let clean: String = digits.chars().filter(|c| *c != '_').collect();
    if clean.is_empty() || !clean.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let magnitude: i128 = clean.parse().ok()?;
    Some(if negative { -magnitude } else { magnitude })
}

/// Python `float()` of a string: surrounding whitespace, sign, decimal or exponent forms,
/// `inf`/`infinity`/`nan` in any case, and single `_` between digits.
pub fn py_float(text: &str) -> Option<f64> {
    let t = text.trim();
    if t.is_empty() || !underscores_between_digits(t) {
        return None;
    }
    let clean: String = t.chars().filter(|c| *c != '_').collect();
    let body = clean.trim_start_matches(['+', '-']);
    // Rust also accepts forms Python refuses only in the sign: a doubled sign.
    if clean.len() - body.len() > 1 {
        return None;
    }
    clean.parse().ok()
}

/// Whether every `_` in `s` sits between two ASCII digits (Python's numeric literal rule).
pub(crate) fn underscores_between_digits(s: &str) -> bool {
    let b = s.as_bytes();
    b.iter().enumerate().all(|(i, c)| {
        *c != b'_'
            || (i > 0 && b[i - 1].is_ascii_digit() && b.get(i + 1).is_some_and(u8::is_ascii_digit))
    })
}

/// Splits a comma list, dropping empty pieces without trimming (ENV-3, ENV-12).
pub(crate) fn split_list(raw: &str) -> Vec<String> {
    raw.split(',')
        .filter(|p| !p.is_empty())
        .map(str::to_owned)
        .collect()
}

/// A `VF_CONFIG` error carrying the variable (and value) as context.
pub(crate) fn config_error(
    var: &str,
    value: Option<&str>,
    message: String,
    remedy: String,
) -> VfError {
    let err = VfError::new(ErrorCode::Config, message)
        .with_remedy(remedy)
        .with_context("variable", var);
    match value {
        Some(v) => err.with_context("value", v),
        None => err,
    }
}

/// `<VAR>='<v>' is not a number.` (ENV-1).
pub(crate) fn not_a_number(var: &str, value: &str, remedy: &str) -> VfError {
    config_error(
        var,
        Some(value),
        format!("{var}={} is not a number.", py_repr_str(value)),
        remedy.to_owned(),
    )
}

/// `<VAR> is not valid JSON: …` (ENV-1).
pub(crate) fn invalid_json(
    var: &str,
    value: &str,
    detail: impl std::fmt::Display,
    remedy: &str,
) -> VfError {
    config_error(
        var,
        Some(value),
        format!("{var} is not valid JSON: {detail}"),
        remedy.to_owned(),
    )
}

/// A read-only view of the variables with the typed accessors 1.0.4's reads map onto.
pub(crate) struct Env<'a>(pub(crate) &'a BTreeMap<String, String>);

impl Env<'_> {
    pub(crate) fn get(&self, var: &str) -> Option<&str> {
        self.0.get(var).map(String::as_str)
    }

    pub(crate) fn non_empty(&self, var: &str) -> Option<&str> {
        self.get(var).filter(|v| !v.is_empty())
    }

    /// `os.environ[VAR]`: absent ⇒ `<VAR> is required.`; an empty value is present.
    pub(crate) fn required(&self, var: &str) -> Result<&str, VfError> {
        self.get(var).ok_or_else(|| {
            config_error(
                var,
                None,
                format!("{var} is required."),
                format!("Set {var}; the control plane renders it for every node worker."),
            )
        })
    }

    /// `int(os.environ.get(VAR, default))`: an empty value is not a number.
    pub(crate) fn int_or(&self, var: &str, default: i64) -> Result<i64, VfError> {
        match self.get(var) {
            None => Ok(default),
            Some(v) => parse_i64(var, v),
        }
    }

    /// `int(v) if v else None`.
    pub(crate) fn optional_int(&self, var: &str) -> Result<Option<i64>, VfError> {
        self.non_empty(var).map(|v| parse_i64(var, v)).transpose()
    }

    /// `float(os.environ.get(VAR, default))`: an empty value is not a number.
    pub(crate) fn float_or(&self, var: &str, default: f64) -> Result<f64, VfError> {
        match self.get(var) {
            None => Ok(default),
            Some(v) => py_float(v).ok_or_else(|| {
                not_a_number(var, v, &format!("Set {var} to a number, or unset it."))
            }),
        }
    }
}

/// Python `int()` into i64; out of range is reported as such.
pub(crate) fn parse_i64(var: &str, v: &str) -> Result<i64, VfError> {
    let n = py_int(v)
        .ok_or_else(|| not_a_number(var, v, &format!("Set {var} to an integer, or unset it.")))?;
    i64::try_from(n).map_err(|_| {
        config_error(
            var,
            Some(v),
            format!("{var}={} is out of range.", py_repr_str(v)),
            format!("Set {var} to an integer that fits in 64 bits, or unset it."),
        )
    })
}

/// A float variable with a range rule and the reference's exact texts (ENV-15 and friends).
pub(crate) struct FloatRule {
    pub(crate) var: &'static str,
    /// Message tail when the value is not a float (`is not a number.`).
    pub(crate) not_number: &'static str,
    /// Message tail when the value breaks `ok` (`is negative.`).
    pub(crate) out_of_range: &'static str,
    pub(crate) ok: fn(f64) -> bool,
    pub(crate) remedy: &'static str,
    /// Whether a whitespace-only value counts as unset (as `float()` never sees it).
    pub(crate) blank_is_unset: bool,
}

impl FloatRule {
    /// `None` when unset or empty; otherwise the value, or the ConfigError with the exact text.
    pub(crate) fn parse(&self, raw: Option<&str>) -> Result<Option<f64>, VfError> {
        let unset = |v: &str| {
            if self.blank_is_unset {
                v.trim().is_empty()
            } else {
                v.is_empty()
            }
        };
        let Some(v) = raw.filter(|v| !unset(v)) else {
            return Ok(None);
        };
        let fail = |tail: &str| {
            config_error(
                self.var,
                Some(v),
                format!("{}={} {tail}", self.var, py_repr_str(v)),
                self.remedy.to_owned(),
            )
        };
        let x = py_float(v).ok_or_else(|| fail(self.not_number))?;
        if !(self.ok)(x) {
            return Err(fail(self.out_of_range));
        }
        // Every rule is a span of seconds or a share: beyond MAX_SECONDS no Duration holds it.
        if !x.is_finite() || x > MAX_SECONDS {
            return Err(fail("is not a usable number of seconds."));
        }
        Ok(Some(x))
    }
}

/// `VF_STREAM_MAX_AGE_SECONDS` (already read as an integer): the age bound on every node
/// stream, `None` when unset.
///
/// # Errors
/// `VF_CONFIG` naming the variable outside 120 ..= about 100 years (JetStream refuses an age
/// below the streams' 120 s duplicate window).
pub fn stream_max_age(raw: Option<i64>) -> Result<Option<Duration>, VfError> {
    use videoflow_core::model::{MAX_STREAM_MAX_AGE_SECONDS, MIN_STREAM_MAX_AGE_SECONDS};
    const VAR: &str = "VF_STREAM_MAX_AGE_SECONDS";
    let Some(secs) = raw else {
        return Ok(None);
    };
    match u64::try_from(secs) {
        Ok(s) if (MIN_STREAM_MAX_AGE_SECONDS..=MAX_STREAM_MAX_AGE_SECONDS).contains(&secs) => {
            Ok(Some(Duration::from_secs(s)))
        }
        _ => Err(config_error(
            VAR,
            Some(&secs.to_string()),
            format!(
                "{VAR}={secs} is outside {MIN_STREAM_MAX_AGE_SECONDS}..={MAX_STREAM_MAX_AGE_SECONDS} seconds: \
                 JetStream refuses an age bound below the streams' 120 s duplicate window."
            ),
            format!(
                "Set {VAR} to at least {MIN_STREAM_MAX_AGE_SECONDS}, or unset it for no age bound."
            ),
        )),
    }
}

/// The longest span a seconds variable or parameter may name: about 100 years. Beyond it a
/// [`Duration`] is no longer a meaningful wait and `Duration::from_secs_f64` would panic on
/// the largest values (`1e300`) and on `inf`.
pub const MAX_SECONDS: f64 = 100.0 * 365.25 * 86_400.0;

/// `seconds` as a [`Duration`], refused with a `VF_CONFIG` error naming `what` (a variable or
/// a parameter) when it is not finite, negative or beyond [`MAX_SECONDS`].
///
/// # Errors
/// `VF_CONFIG` `<what>=<seconds> is not a usable number of seconds.`
pub fn bounded_seconds(what: &str, seconds: f64) -> Result<Duration, VfError> {
    if seconds.is_finite()
        && (0.0..=MAX_SECONDS).contains(&seconds)
        && let Ok(d) = Duration::try_from_secs_f64(seconds)
    {
        return Ok(d);
    }
    Err(VfError::new(
        ErrorCode::Config,
        format!("{what}={seconds} is not a usable number of seconds."),
    )
    .with_remedy(format!(
        "Set {what} to a finite number of seconds between 0 and {MAX_SECONDS:.0}."
    ))
    .with_context("variable", what))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounded_seconds_refuses_what_would_panic() {
        assert_eq!(
            bounded_seconds("V", 1.5).ok(),
            Some(Duration::from_millis(1500))
        );
        assert_eq!(bounded_seconds("V", 0.0).ok(), Some(Duration::ZERO));
        for bad in [f64::INFINITY, f64::NAN, -1.0, 1e300, MAX_SECONDS * 2.0] {
            let e = bounded_seconds("VF_X", bad).expect_err("refused");
            assert_eq!(e.code, ErrorCode::Config, "{bad}");
            assert!(e.to_string().contains("VF_X"), "{e}");
        }
    }

    #[test]
    fn env_5_py_int_accepts_what_python_accepts() {
        assert_eq!(py_int(" 3 "), Some(3));
        assert_eq!(py_int("+2"), Some(2));
        assert_eq!(py_int("-2"), Some(-2));
        assert_eq!(py_int("1_0"), Some(10));
        assert_eq!(py_int("\t7\n"), Some(7));
        for bad in [
            "", " ", "abc", "1__0", "_1", "1_", "+", "1.0", "--1", "+-1", "0x10",
        ] {
            assert_eq!(py_int(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn env_1_py_float_accepts_what_python_accepts() {
        assert_eq!(py_float(" 1.5 "), Some(1.5));
        assert_eq!(py_float("1_000.5"), Some(1000.5));
        assert_eq!(py_float("-2e3"), Some(-2000.0));
        assert_eq!(py_float(".5"), Some(0.5));
        assert_eq!(py_float("Infinity"), Some(f64::INFINITY));
        assert!(py_float("nan").is_some_and(f64::is_nan));
        for bad in ["", "abc", "1__0", "_1", "1_.5", "--1", "1e", "."] {
            assert_eq!(py_float(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn env_3_split_list_keeps_spaces() {
        assert_eq!(split_list("a,,b, c,"), vec!["a", "b", " c"]);
        assert!(split_list("").is_empty());
    }
}
