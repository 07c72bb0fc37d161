//! Kubernetes resource quantities (`2`, `500m`, `100Mi`, `1Gi`), resource sums, and the queue
//! capability Volcano's gang admission compares them to.

use std::collections::BTreeMap;
use std::fmt;

/// The pattern the apiserver quotes when it refuses a quantity.
pub(crate) const QUANTITY_PATTERN: &str = "^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$";

/// The pattern the PyTorchJob CRD's schema gives every `resources` quantity.
pub(crate) const QUANTITY_SCHEMA_PATTERN: &str = r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$";

/// A quantity that could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid quantity {value:?}: {reason}")]
pub(crate) struct QuantityError {
    /// The text that was seen.
    pub value: String,
    /// What was wrong with it.
    pub reason: String,
}

/// Parse a quantity into thousandths of its unit (millicores for cpu, millibytes for memory),
/// rounding up as Kubernetes does for values finer than a milli-unit.
pub(crate) fn parse_quantity(text: &str) -> Result<u128, QuantityError> {
    let err = |reason: &str| QuantityError { value: text.to_string(), reason: reason.to_string() };
    let t = text.trim();
    let number_end = t.find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '+' || c == '-')).unwrap_or(t.len());
    let (number, suffix) = t.split_at(number_end);
    let number = number.strip_prefix('+').unwrap_or(number);
    if number.starts_with('-') {
        return Err(err("must not be negative"));
    }
    let (int_part, frac_part) = number.split_once('.').unwrap_or((number, ""));
    let digits_ok = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    if (int_part.is_empty() && frac_part.is_empty()) || !digits_ok(int_part) || !digits_ok(frac_part) {
        return Err(err(&format!("quantities must match the regular expression '{QUANTITY_PATTERN}'")));
    }
    let (num, den) = suffix_scale(suffix).ok_or_else(|| {
        err(&format!(
            "unknown suffix {suffix:?}: expected one of n u m k M G T P E Ki Mi Gi Ti Pi Ei or an exponent like e3"
        ))
    })?;
    let too_large = || err("too large");
    let mantissa_digits = format!("{int_part}{frac_part}");
    let mantissa_digits = mantissa_digits.trim_start_matches('0');
    if mantissa_digits.len() > 30 {
        return Err(too_large());
    }
    let mantissa: u128 =
        if mantissa_digits.is_empty() { 0 } else { mantissa_digits.parse().map_err(|_| too_large())? };
    let frac_scale = u32::try_from(frac_part.len()).ok().and_then(|n| 10u128.checked_pow(n)).ok_or_else(too_large)?;
    let numerator = mantissa.checked_mul(1000).and_then(|v| v.checked_mul(num)).ok_or_else(too_large)?;
    let denominator = frac_scale.checked_mul(den).ok_or_else(too_large)?;
    Ok(numerator.div_ceil(denominator))
}

/// The (numerator, denominator) a suffix scales by.
fn suffix_scale(suffix: &str) -> Option<(u128, u128)> {
    let binary = |p: u32| Some((1024u128.pow(p), 1));
    let decimal = |p: i32| {
        let scale = 10u128.checked_pow(p.unsigned_abs())?;
        Some(if p >= 0 { (scale, 1) } else { (1, scale) })
    };
    match suffix {
        "" => decimal(0),
        "n" => decimal(-9),
        "u" => decimal(-6),
        "m" => decimal(-3),
        "k" => decimal(3),
        "M" => decimal(6),
        "G" => decimal(9),
        "T" => decimal(12),
        "P" => decimal(15),
        "E" => decimal(18),
        "Ki" => binary(1),
        "Mi" => binary(2),
        "Gi" => binary(3),
        "Ti" => binary(4),
        "Pi" => binary(5),
        "Ei" => binary(6),
        _ => {
            let exp = suffix.strip_prefix(['e', 'E'])?;
            let exp: i32 = exp.parse().ok()?;
            if !(-30..=30).contains(&exp) {
                return None;
            }
            decimal(exp)
        }
    }
}

/// Render thousandths of a unit the way a user writes the resource: cpu `2`/`500m`, memory
/// `100Mi`/`1Gi`/bytes.
pub(crate) fn format_quantity(resource: &str, milli: u128) -> String {
    if resource == "cpu" || !milli.is_multiple_of(1000) {
        return if milli.is_multiple_of(1000) { format!("{}", milli / 1000) } else { format!("{milli}m") };
    }
    let units = milli / 1000;
    for (suffix, scale) in
        [("Ei", 1u128 << 60), ("Pi", 1 << 50), ("Ti", 1 << 40), ("Gi", 1 << 30), ("Mi", 1 << 20), ("Ki", 1 << 10)]
    {
        if units >= scale && units.is_multiple_of(scale) {
            return format!("{}{suffix}", units / scale);
        }
    }
    units.to_string()
}

/// Amounts of named resources (`cpu`, `memory`, `nvidia.com/gpu`, ...) in thousandths of a unit.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Resources(pub BTreeMap<String, u128>);

impl Resources {
    /// Add every amount of `other` to this one.
    pub(crate) fn add(&mut self, other: &Resources) {
        for (name, amount) in &other.0 {
            let slot = self.0.entry(name.clone()).or_insert(0);
            *slot = slot.saturating_add(*amount);
        }
    }

    /// The amount of one resource (0 when absent).
    pub(crate) fn get(&self, name: &str) -> u128 {
        self.0.get(name).copied().unwrap_or(0)
    }
}

impl fmt::Display for Resources {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts: Vec<String> =
            self.0.iter().map(|(name, amount)| format!("{name}={}", format_quantity(name, *amount))).collect();
        f.write_str(&parts.join(","))
    }
}

/// A `--queue-capability` that could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid queue capability {spec:?}: part {part:?}: {reason} (expected cpu=N,memory=M, e.g. cpu=2,memory=4Gi)")]
pub(crate) struct CapabilityError {
    /// The whole option value.
    pub spec: String,
    /// The comma-separated part at fault.
    pub part: String,
    /// What was wrong with it.
    pub reason: String,
}

/// A Volcano queue's `spec.capability`: the most the queue's running jobs may hold.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct QueueCapability(pub(crate) Resources);

impl QueueCapability {
    /// Parse `cpu=2,memory=1Gi` (any resource name; each at most once).
    pub(crate) fn parse(spec: &str) -> Result<Self, CapabilityError> {
        let mut out = Resources::default();
        for part in spec.split(',') {
            let err = |reason: String| CapabilityError { spec: spec.to_string(), part: part.to_string(), reason };
            let (name, value) = part.split_once('=').ok_or_else(|| err("expected NAME=QUANTITY".to_string()))?;
            let name = name.trim();
            let valid_name = !name.is_empty()
                && name.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'/'));
            if !valid_name {
                return Err(err(format!("invalid resource name {name:?}")));
            }
            if out.0.contains_key(name) {
                return Err(err(format!("resource {name} given twice")));
            }
            let amount = parse_quantity(value).map_err(|e| err(e.to_string()))?;
            out.0.insert(name.to_string(), amount);
        }
        Ok(Self(out))
    }

    /// Volcano's gang admission: `None` if the whole job fits, else the first resource that
    /// does not fit as (name, capability, demand).
    pub(crate) fn shortfall(&self, demand: &Resources) -> Option<(String, u128, u128)> {
        self.0
             .0
            .iter()
            .find(|(name, cap)| demand.get(name) > **cap)
            .map(|(name, cap)| (name.clone(), *cap, demand.get(name)))
    }
}

impl fmt::Display for QueueCapability {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_quantities() {
        assert_eq!(parse_quantity("2"), Ok(2000));
        assert_eq!(parse_quantity("500m"), Ok(500));
        assert_eq!(parse_quantity("0.5"), Ok(500));
        assert_eq!(parse_quantity("1.5"), Ok(1500));
        assert_eq!(parse_quantity(".25"), Ok(250));
        assert_eq!(parse_quantity("+1"), Ok(1000));
        assert_eq!(parse_quantity("1u"), Ok(1), "finer than a milli-unit rounds up");
    }

    #[test]
    fn memory_quantities() {
        assert_eq!(parse_quantity("100Mi"), Ok(100 * 1024 * 1024 * 1000));
        assert_eq!(parse_quantity("1Gi"), Ok(1024 * 1024 * 1024 * 1000));
        assert_eq!(parse_quantity("128974848"), Ok(128_974_848_000));
        assert_eq!(parse_quantity("129e6"), Ok(129_000_000_000));
        assert_eq!(parse_quantity("129M"), Ok(129_000_000_000));
        assert_eq!(parse_quantity("1k"), Ok(1_000_000));
        assert_eq!(parse_quantity("1Ki"), Ok(1_024_000));
    }

    #[test]
    fn bad_quantities_name_the_value() {
        for bad in ["", "abc", "1x", "-1", "1..2", "Mi", "1e99", "99999999999999999999999999999999Ei"] {
            let e = parse_quantity(bad).unwrap_err();
            assert_eq!(e.value, bad);
        }
        assert!(parse_quantity("-1").unwrap_err().to_string().contains("negative"));
        assert!(parse_quantity("abc").unwrap_err().to_string().contains(QUANTITY_PATTERN));
        assert!(parse_quantity("1x").unwrap_err().to_string().contains("unknown suffix \"x\""));
    }

    #[test]
    fn quantities_render_back() {
        assert_eq!(format_quantity("cpu", 2000), "2");
        assert_eq!(format_quantity("cpu", 500), "500m");
        assert_eq!(format_quantity("memory", 400 * 1024 * 1024 * 1000), "400Mi");
        assert_eq!(format_quantity("memory", 1024 * 1024 * 1024 * 1000), "1Gi");
        assert_eq!(format_quantity("memory", 1_000_000), "1000");
    }

    #[test]
    fn capability_parses_and_names_the_bad_part() {
        let cap = QueueCapability::parse("cpu=2,memory=1Gi").unwrap();
        assert_eq!(cap.0.get("cpu"), 2000);
        assert_eq!(cap.to_string(), "cpu=2,memory=1Gi");
        assert_eq!(QueueCapability::parse("cpu=500m").unwrap().0.get("cpu"), 500);
        assert_eq!(QueueCapability::parse("memory=1000").unwrap().0.get("memory"), 1_000_000);

        let e = QueueCapability::parse("cpu=2,memory=lots").unwrap_err();
        assert_eq!(e.part, "memory=lots");
        assert!(e.to_string().contains("expected cpu=N,memory=M"), "{e}");
        assert_eq!(QueueCapability::parse("cpu").unwrap_err().part, "cpu");
        assert_eq!(QueueCapability::parse("cpu=1,cpu=2").unwrap_err().part, "cpu=2");
        assert_eq!(QueueCapability::parse("=1").unwrap_err().part, "=1");
        assert_eq!(QueueCapability::parse("").unwrap_err().part, "");
    }

    #[test]
    fn gang_admission_compares_every_capped_resource() {
        let cap = QueueCapability::parse("cpu=2").unwrap();
        let mut demand = Resources::default();
        demand.0.insert("cpu".into(), 4000);
        demand.0.insert("memory".into(), 1);
        assert_eq!(cap.shortfall(&demand), Some(("cpu".into(), 2000, 4000)));
        let roomy = QueueCapability::parse("cpu=4,memory=1Gi").unwrap();
        assert_eq!(roomy.shortfall(&demand), None);
    }
}
