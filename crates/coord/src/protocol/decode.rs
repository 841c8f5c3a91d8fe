//! The answers of the library's functions: an acquire's [`Verdict`], a release's
//! [`Released`], one answer per operation of a batch, and the other functions' answers.
//!
//! Invariant: an answer of an unexpected shape is [`CoordError::Protocol`], never a guess; a
//! server's error reply is [`CoordError::Redis`] with Redis's code and text (never logged with
//! a tenant ID: keys hold only hashes).

use redis::Value;
use turnstile_admission::Millis;

use crate::breaker::BreakerState;
use crate::error::CoordError;
use crate::verdict::Verdict;

/// What a release did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Released {
    /// The server clock, read only when the release set a pause (0 otherwise).
    pub(crate) now: Millis,
    /// The provider pause after this release (server ms), if it set or met one.
    pub(crate) paused_until: Option<Millis>,
    /// The shared breaker's state after this release (when the lane has one).
    pub(crate) breaker: Option<BreakerState>,
}

/// Whether a call failed because Redis does not have the library (it lost its state).
pub(crate) fn is_missing_function(error: &redis::RedisError) -> bool {
    error.to_string().contains("Function not found")
}

/// Whether a raw answer is Redis's "function not found" error reply.
pub(crate) fn is_missing_function_reply(value: &Value) -> bool {
    matches!(value, Value::ServerError(error) if error.details().is_some_and(|d| d.contains("Function not found")) || error.code().contains("Function not found"))
}

/// The answer of the call `encode::ops_command` made for `count` operations: one value per
/// operation (a lone operation's single call answers its value alone), or why not.
pub(crate) fn ops_answers(value: Value, count: usize) -> Result<Vec<Value>, CoordError> {
    if count == 1 {
        server_error(&value)?;
        return Ok(vec![value]);
    }
    batch_answers(value, count)
}

fn server_error(value: &Value) -> Result<(), CoordError> {
    if let Value::ServerError(error) = value {
        return Err(CoordError::Redis(format!(
            "{} {}",
            error.code(),
            error.details().unwrap_or("")
        )));
    }
    Ok(())
}

/// A batch's answer: one value per operation (`count`), or why not.
fn batch_answers(value: Value, count: usize) -> Result<Vec<Value>, CoordError> {
    server_error(&value)?;
    let answers = array(value)?;
    if answers.len() != count {
        return Err(CoordError::Protocol(format!(
            "batch of {count} answered {}",
            answers.len()
        )));
    }
    Ok(answers)
}

/// An integer (or a bulk string holding one).
pub(crate) fn int(value: &Value) -> Result<i64, CoordError> {
    match value {
        Value::Int(i) => Ok(*i),
        Value::BulkString(bytes) => std::str::from_utf8(bytes)
            .ok()
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| CoordError::Protocol("not an integer".into())),
        other => Err(CoordError::Protocol(format!("{other:?}"))),
    }
}

/// A string.
pub(crate) fn text(value: &Value) -> Result<String, CoordError> {
    match value {
        Value::BulkString(bytes) => Ok(String::from_utf8_lossy(bytes).into_owned()),
        Value::SimpleString(s) => Ok(s.clone()),
        other => Err(CoordError::Protocol(format!("{other:?}"))),
    }
}

/// An array's items.
pub(crate) fn array(value: Value) -> Result<Vec<Value>, CoordError> {
    match value {
        Value::Array(items) => Ok(items),
        other => Err(CoordError::Protocol(format!("{other:?}"))),
    }
}

/// A server instant (ms), never negative.
fn instant(value: &Value) -> Result<Millis, CoordError> {
    Ok(u64::try_from(int(value)?).unwrap_or(0))
}

/// An acquire's answer (alone, or its place in a batch's answer).
pub(crate) fn decode_acquire(value: Value) -> Result<Verdict, CoordError> {
    if let Value::Int(now) = value {
        // A plain grant answers its instant alone.
        let now = u64::try_from(now).map_err(|_| CoordError::Protocol("negative time".into()))?;
        return Ok(Verdict::Granted { now, probe: false });
    }
    let items = array(value)?;
    let [verdict, reason, scope, instant, now] = items.as_slice() else {
        return Err(CoordError::Protocol("acquire answer".into()));
    };
    Verdict::decode(
        &text(verdict)?,
        &text(reason)?,
        int(scope)?,
        int(instant)?,
        int(now)?,
    )
}

/// A release's answer (alone, or its place in a batch's answer).
pub(crate) fn decode_release(value: Value) -> Result<Released, CoordError> {
    if let Value::Int(_) = value {
        // A plain release: no clock read, no pause, no breaker.
        return Ok(Released {
            now: 0,
            paused_until: None,
            breaker: None,
        });
    }
    let items = array(value)?;
    let (now, until, state) = match items.as_slice() {
        [now, until] => (now, until, None),
        [now, until, state] => (now, until, Some(state)),
        _ => return Err(CoordError::Protocol("release answer".into())),
    };
    let until = int(until)?;
    let breaker = match state {
        Some(state) => BreakerState::decode(&text(state)?)?,
        None => None,
    };
    Ok(Released {
        now: instant(now)?,
        paused_until: (until > 0).then(|| u64::try_from(until).unwrap_or(0)),
        breaker,
    })
}

/// A renewal's answer for one workspace (`ts_renew_v5`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Renewed {
    /// The server clock (ms).
    pub(crate) now: Millis,
    /// The workspace's books epoch now (the server ms from which its books are trusted).
    pub(crate) epoch: String,
    /// The epoch was missing or not the one the replica knew: Redis lost the books, and every
    /// lease of the batch was registered again.
    pub(crate) lost: bool,
    /// Members an `xx` renewal did not find (evicted or deleted, or released meanwhile).
    pub(crate) missing: Vec<String>,
}

/// A renewal's answer: `{now, written, epoch, lost, {missing members}}`.
pub(crate) fn decode_renew(value: Value) -> Result<Renewed, CoordError> {
    server_error(&value)?;
    let items = array(value)?;
    let [now, _written, epoch, lost, missing] = items.as_slice() else {
        return Err(CoordError::Protocol("renew answer".into()));
    };
    let missing = match missing {
        Value::Array(members) => members.iter().map(text).collect::<Result<_, _>>()?,
        other => return Err(CoordError::Protocol(format!("{other:?}"))),
    };
    Ok(Renewed {
        now: instant(now)?,
        epoch: match epoch {
            Value::Int(i) => i.to_string(),
            other => text(other)?,
        },
        lost: int(lost)? == 1,
        missing,
    })
}

/// The clock's answer (server ms).
pub(crate) fn decode_time(value: &Value) -> Result<Millis, CoordError> {
    u64::try_from(int(value)?).map_err(|_| CoordError::Protocol("time".into()))
}

/// A breaker merge's answer: the state after the merge.
pub(crate) fn decode_breaker(value: Value) -> Result<Option<BreakerState>, CoordError> {
    let items = array(value)?;
    let [_now, state] = items.as_slice() else {
        return Err(CoordError::Protocol("breaker answer".into()));
    };
    BreakerState::decode(&text(state)?)
}

/// A pause's answer: (the pause's end, the server's now), server ms.
pub(crate) fn decode_pause(value: Value) -> Result<(Millis, Millis), CoordError> {
    let items = array(value)?;
    let [now, until] = items.as_slice() else {
        return Err(CoordError::Protocol("pause answer".into()));
    };
    Ok((instant(until)?, instant(now)?))
}

/// A conformance run's answer: per step (admitted, wait ms or -1 for never, level in whole
/// units).
#[cfg(any(test, feature = "testing"))]
pub(crate) fn decode_bucket_run(value: Value) -> Result<Vec<super::ops::BucketStep>, CoordError> {
    array(value)?
        .chunks(3)
        .map(|step| match step {
            [ok, wait, level] => Ok((int(ok)? == 1, int(wait)?, instant(level)?)),
            _ => Err(CoordError::Protocol("bucket step".into())),
        })
        .collect()
}
