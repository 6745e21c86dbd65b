//! Kubernetes resource quantities (`resource.Quantity`): as much as `resourcesPolicy`
//! needs to read a container's `resources`, do Kruise's arithmetic on them and write
//! the result the way the apiserver would print it ("1500m", "300Mi", "2073741824").
//!
//! A value is an exact decimal (`mantissa × 10^scale`); the format (DecimalSI,
//! BinarySI, DecimalExponent) only decides how it prints, with Kubernetes' canonical
//! rules: a binary value that is not whole or is below 1024 prints as DecimalSI; a
//! decimal one prints with the smallest integer mantissa whose exponent is a
//! multiple of 3. Caveat: values past what an i128 holds are refused, where
//! Kubernetes falls back to arbitrary precision; no container asks for 10^20 cores.

use std::cmp::Ordering;
use std::fmt;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    DecimalSI,
    BinarySI,
    DecimalExponent,
}

#[derive(Clone, Debug)]
pub struct Quantity {
    mantissa: i128,
    scale: i32,
    pub format: Format,
}

pub const SYNTAX: &str = "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'";

const DECIMAL: [(&str, i32); 9] =
    [("n", -9), ("u", -6), ("m", -3), ("k", 3), ("M", 6), ("G", 9), ("T", 12), ("P", 15), ("E", 18)];
const BINARY: [(&str, u32); 6] = [("Ki", 1), ("Mi", 2), ("Gi", 3), ("Ti", 4), ("Pi", 5), ("Ei", 6)];

impl Quantity {
    /// `resource.ParseQuantity`.
    pub fn parse(s: &str) -> Result<Quantity, String> {
        let num_end = s
            .char_indices()
            .find(|&(i, c)| !(c.is_ascii_digit() || c == '.' || (i == 0 && (c == '+' || c == '-'))))
            .map_or(s.len(), |(i, _)| i);
        let (num, suffix) = s.split_at(num_end);
        let (negative, digits) = match num.strip_prefix('-') {
            Some(d) => (true, d),
            None => (false, num.strip_prefix('+').unwrap_or(num)),
        };
        let (whole, frac) = digits.split_once('.').unwrap_or((digits, ""));
        if (whole.is_empty() && frac.is_empty()) || frac.contains('.') || whole.len() + frac.len() > 30 {
            return Err(SYNTAX.into());
        }
        let mut mantissa: i128 = format!("{whole}{frac}").parse().map_err(|_| SYNTAX.to_owned())?;
        let mut scale = -(frac.len() as i32);
        let format = if let Some(&(_, e)) = DECIMAL.iter().find(|(x, _)| *x == suffix) {
            scale += e;
            Format::DecimalSI
        } else if let Some(&(_, p)) = BINARY.iter().find(|(x, _)| *x == suffix) {
            mantissa = mantissa.checked_mul(1024i128.pow(p)).ok_or(SYNTAX)?;
            Format::BinarySI
        } else if suffix.is_empty() {
            Format::DecimalSI
        } else if let Some(e) = suffix.strip_prefix(['e', 'E']) {
            scale = e.parse::<i32>().ok().and_then(|e| scale.checked_add(e)).ok_or(SYNTAX)?;
            Format::DecimalExponent
        } else {
            return Err(SYNTAX.into());
        };
        // Kubernetes holds no quantity anywhere near 10^±1000; bounding the exponent
        // keeps every later step's arithmetic in range.
        if !(-1000..=1000).contains(&scale) {
            return Err("quantity out of range".into());
        }
        Ok(Quantity { mantissa: if negative { -mantissa } else { mantissa }, scale, format }.normal())
    }

    /// `resource.NewMilliQuantity`.
    pub fn from_milli(milli: i64, format: Format) -> Quantity {
        Quantity { mantissa: i128::from(milli), scale: -3, format }.normal()
    }

    pub fn zero() -> Quantity {
        Quantity { mantissa: 0, scale: 0, format: Format::DecimalSI }
    }

    /// Trailing zeros folded into the scale, so values compare and add cheaply.
    fn normal(mut self) -> Quantity {
        if self.mantissa == 0 {
            self.scale = 0;
        }
        while self.mantissa != 0 && self.mantissa % 10 == 0 {
            self.mantissa /= 10;
            self.scale += 1;
        }
        self
    }

    pub fn is_zero(&self) -> bool {
        self.mantissa == 0
    }

    pub fn is_negative(&self) -> bool {
        self.mantissa < 0
    }

    /// Both mantissas at the smaller scale (None: past i128).
    fn aligned(&self, other: &Quantity) -> Option<(i128, i128, i32)> {
        let s = self.scale.min(other.scale);
        let up = |q: &Quantity| {
            let e = u32::try_from(i64::from(q.scale) - i64::from(s)).ok()?;
            10i128.checked_pow(e).and_then(|f| q.mantissa.checked_mul(f))
        };
        Some((up(self)?, up(other)?, s))
    }

    /// `Quantity.Add`: the format is this one's, or `other`'s when this is zero.
    pub fn add(&self, other: &Quantity) -> Result<Quantity, String> {
        let format = if self.is_zero() { other.format } else { self.format };
        let (a, b, scale) = self.aligned(other).ok_or("quantity out of range")?;
        let mantissa = a.checked_add(b).ok_or("quantity out of range")?;
        Ok(Quantity { mantissa, scale, format }.normal())
    }

    pub fn neg(&self) -> Quantity {
        Quantity { mantissa: -self.mantissa, ..self.clone() }
    }

    pub fn cmp(&self, other: &Quantity) -> Ordering {
        match self.aligned(other) {
            Some((a, b, _)) => a.cmp(&b),
            None => self.mantissa.signum().cmp(&other.mantissa.signum()).then(self.scale.cmp(&other.scale)),
        }
    }

    /// `MilliValue`: the value in thousandths, rounded up.
    pub fn milli_value(&self) -> i64 {
        let s = self.scale.saturating_add(3);
        let v = if s >= 0 {
            10i128.checked_pow(s as u32).and_then(|f| self.mantissa.checked_mul(f)).unwrap_or(i128::MAX)
        } else {
            let d = 10i128.checked_pow((-s) as u32).unwrap_or(i128::MAX);
            let q = self.mantissa.div_euclid(d);
            if self.mantissa.rem_euclid(d) == 0 { q } else { q + 1 }
        };
        v.clamp(i128::from(i64::MIN), i128::from(i64::MAX)) as i64
    }

    /// `SetMilli`: the value becomes `milli` thousandths; the format stays.
    pub fn set_milli(&self, milli: i64) -> Quantity {
        Quantity::from_milli(milli, self.format)
    }

    /// The value as a whole number, if it is one.
    fn whole(&self) -> Option<i128> {
        if self.scale >= 0 { 10i128.checked_pow(self.scale as u32)?.checked_mul(self.mantissa) } else { None }
    }
}

impl fmt::Display for Quantity {
    /// `Quantity.String` (`CanonicalizeBytes`).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_zero() {
            return f.write_str("0");
        }
        if self.format == Format::BinarySI
            && let Some(mut v) = self.whole().filter(|v| v.abs() >= 1024)
        {
            let mut exp = 0;
            while v % 1024 == 0 && exp < 6 {
                v /= 1024;
                exp += 1;
            }
            let suffix = BINARY.iter().find(|(_, p)| *p == exp).map_or("", |(s, _)| *s);
            return write!(f, "{v}{suffix}");
        }
        // Lower the exponent to a multiple of 3 (the mantissa has no trailing zeros).
        let (mut m, mut e) = (self.mantissa, self.scale);
        while e.rem_euclid(3) != 0 {
            let Some(n) = m.checked_mul(10) else { return write!(f, "{}e{}", self.mantissa, self.scale) };
            m = n;
            e -= 1;
        }
        let si = DECIMAL.iter().find(|(_, x)| *x == e).map(|(s, _)| *s);
        match (self.format, si) {
            (_, _) if e == 0 => write!(f, "{m}"),
            (Format::DecimalExponent, _) | (_, None) => write!(f, "{m}e{e}"),
            (_, Some(s)) => write!(f, "{m}{s}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(s: &str) -> Quantity {
        Quantity::parse(s).unwrap()
    }

    #[test]
    fn parses_and_prints_as_kubernetes() {
        for (input, want) in [
            ("100m", "100m"),
            ("1", "1"),
            ("1.5", "1500m"),
            ("0.5", "500m"),
            ("1k", "1k"),
            ("1000", "1k"),
            ("1500M", "1500M"),
            ("1.5G", "1500M"),
            ("100Mi", "100Mi"),
            ("1024Mi", "1Gi"),
            ("1.5Gi", "1536Mi"),
            ("512", "512"),
            ("1Ki", "1Ki"),
            ("1e3", "1e3"),
            ("0", "0"),
            ("-100m", "-100m"),
            ("100n", "100n"),
        ] {
            assert_eq!(q(input).to_string(), want, "{input}");
        }
        for bad in ["", "m", "1.2.3", "10x", "1Mix", "--1", "10e2147483647", "1.5e-2147483648", "1e1001"] {
            assert!(Quantity::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn arithmetic_keeps_kubernetes_formats() {
        assert_eq!(q("1G").add(&q("1Gi")).unwrap().to_string(), "2073741824");
        assert_eq!(q("1Gi").add(&q("100Mi")).unwrap().to_string(), "1124Mi");
        assert_eq!(q("0").add(&q("100Mi")).unwrap().to_string(), "100Mi", "a zero takes the other's format");
        assert_eq!(q("1Gi").set_milli(322122547200).to_string(), "322122547200m", "fractional bytes stay decimal");
        assert_eq!(q("1Ki").set_milli(512000).to_string(), "512", "below 1024 prints decimal");
        assert_eq!(q("333m").milli_value(), 333);
        assert_eq!(q("1.0001m").milli_value(), 2, "rounded up");
        assert_eq!(q("-1.5m").milli_value(), -1, "rounded up");
        assert_eq!(q("2").cmp(&q("2000m")), Ordering::Equal);
    }
}
