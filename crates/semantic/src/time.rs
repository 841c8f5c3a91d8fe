//! Epoch-millisecond helpers: building an instant from a UTC civil time and printing one as
//! RFC 3339 (`2026-08-24T20:00:00.000Z`). Pure integer arithmetic (Howard Hinnant's civil-date
//! algorithms), valid for years 1970–9999.

/// Days since 1970-01-01 of the civil date `year-month-day` (proleptic Gregorian).
fn days_from_civil(year: i64, month: u32, day: u32) -> i64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let year_of_era = year - era * 400;
    let month = i64::from(month);
    let day_of_year =
        (153 * (if month > 2 { month - 3 } else { month + 9 }) + 2) / 5 + i64::from(day) - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
}

fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let day_of_era = z - era * 146_097;
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let mp = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    (year, month as u32, day as u32)
}

/// Epoch ms of a UTC civil time. Out-of-range fields are not checked; times before 1970 give 0.
pub fn utc_ms(
    year: i64,
    month: u32,
    day: u32,
    hour: u32,
    minute: u32,
    second: u32,
    ms: u32,
) -> u64 {
    let days = days_from_civil(year, month, day);
    let total = days * 86_400_000
        + i64::from(hour) * 3_600_000
        + i64::from(minute) * 60_000
        + i64::from(second) * 1_000
        + i64::from(ms);
    u64::try_from(total).unwrap_or(0)
}

/// RFC 3339 UTC text with milliseconds for an epoch-ms instant.
pub fn format_utc(epoch_ms: u64) -> String {
    let total = i64::try_from(epoch_ms).unwrap_or(i64::MAX);
    let days = total.div_euclid(86_400_000);
    let in_day = total.rem_euclid(86_400_000);
    let (year, month, day) = civil_from_days(days);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
        in_day / 3_600_000,
        in_day / 60_000 % 60,
        in_day / 1_000 % 60,
        in_day % 1_000
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_known_instants() {
        assert_eq!(utc_ms(1970, 1, 1, 0, 0, 0, 0), 0);
        assert_eq!(utc_ms(2000, 3, 1, 0, 0, 0, 0), 951_868_800_000);
        let at = utc_ms(2026, 8, 24, 20, 0, 0, 0);
        assert_eq!(format_utc(at), "2026-08-24T20:00:00.000Z");
        assert_eq!(format_utc(at + 3_600_000 - 1), "2026-08-24T20:59:59.999Z");
        assert_eq!(
            format_utc(utc_ms(2028, 2, 29, 23, 59, 59, 1)),
            "2028-02-29T23:59:59.001Z"
        );
    }
}
