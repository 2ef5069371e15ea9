//! Statement times: RFC 3339 with `Z` or a numeric offset, read by the
//! gate's age check and by the rules that order verdicts by time.
use std::time::Duration;

/// An RFC 3339 time, with `Z` or a numeric offset (`+01:00`, #50 low):
/// humantime reads only `Z`, so an offset is taken off by hand.
pub fn parse_time(t: &str) -> Result<std::time::SystemTime, String> {
    let t = t.trim();
    let bytes = t.as_bytes();
    // `get`, not an index: the text came from a statement, and the cut may
    // fall inside a multi-byte character (#50 M1's class).
    let offset = (bytes.len() > 6)
        .then(|| t.get(t.len() - 6..))
        .flatten()
        .filter(|o| {
            let o = o.as_bytes();
            matches!(o[0], b'+' | b'-')
                && o[1..3].iter().all(u8::is_ascii_digit)
                && o[3] == b':'
                && o[4..6].iter().all(u8::is_ascii_digit)
        });
    let Some(offset) = offset else {
        return humantime::parse_rfc3339_weak(t).map_err(|e| e.to_string());
    };
    let hours: u64 = offset[1..3]
        .parse()
        .map_err(|_| "a bad offset".to_string())?;
    let minutes: u64 = offset[4..6]
        .parse()
        .map_err(|_| "a bad offset".to_string())?;
    if hours > 23 || minutes > 59 {
        return Err(format!("the offset {offset} is out of range"));
    }
    let local = humantime::parse_rfc3339_weak(&format!("{}Z", t.get(..t.len() - 6).unwrap_or(t)))
        .map_err(|e| e.to_string())?;
    let shift = Duration::from_secs(hours * 3600 + minutes * 60);
    // 10:00+01:00 is 09:00Z: a positive offset is taken off.
    Ok(if offset.starts_with('+') {
        local - shift
    } else {
        local + shift
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_time_ending_in_multi_byte_characters_is_an_error_not_a_panic() {
        for t in ["2026-12-07T10:00:00ééé", "ключ-ключ", "+01:00é"] {
            assert!(parse_time(t).is_err(), "{t}");
        }
    }
}
