//! The expression language of `resourcesPolicy.resourcesExpr`, as Kruise's
//! `pkg/util/calculator`: `+ - * /`, parentheses, unary minus, `max(a, b)` and
//! `min(a, b)`, numbers (`0.5`, `1e3`, `50%` = 0.5), quantities (`100m`, `200Mi`; units
//! m k M G T P Ki Mi Gi Ti Pi) and variables (`cpu`, `memory`; names are
//! case-insensitive).
//!
//! Kruise's arithmetic is kept, not improved on, so that a SidecarSet sizes its
//! sidecars to the same millicore and byte as under Kruise: numbers are f64; a
//! quantity times or over a number goes through its milli value and is truncated
//! (`cpu*29%` of 100m is 28m); a number meeting a quantity becomes
//! `NewMilliQuantity(int64(n*1000))`, with Go's out-of-range conversion (i64::MIN);
//! a malformed number such as `100K` or `2cpu` reads as 0, as Kruise's lexer ignores
//! its parse error. Errors do not stop evaluation: the last one set is the one
//! reported, and a result below zero is an error.

use crate::quantity::{Format, Quantity};
use std::collections::BTreeMap;

#[derive(Clone, Debug)]
pub enum Val {
    Num(f64),
    Q(Quantity),
}

const UNITS: [&str; 11] = ["m", "k", "M", "G", "T", "P", "Ki", "Mi", "Gi", "Ti", "Pi"];

#[derive(Clone, Debug, PartialEq)]
enum Tok {
    Num(String),
    Ident(String),
    Char(u8),
    End,
}

/// Go's `int64(f)` on amd64: truncation, and i64::MIN for anything out of range.
pub fn go_int64(f: f64) -> i64 {
    // 2^63 as f64: the first value past i64's range (NaN is outside it too).
    const LIMIT: f64 = 9_223_372_036_854_775_808.0;
    if !(-LIMIT..LIMIT).contains(&f) { i64::MIN } else { f.trunc() as i64 }
}

fn to_q(v: &Val) -> Quantity {
    match v {
        Val::Q(q) => q.clone(),
        Val::Num(n) => Quantity::from_milli(go_int64(n * 1000.0), Format::DecimalSI),
    }
}

/// Go's `%g` for the numbers an error message shows.
fn g(n: f64) -> String {
    let a = n.abs();
    if a != 0.0 && !(1e-4..1e21).contains(&a) {
        format!("{n:e}").replace('e', "e+").replace("e+-", "e-")
    } else {
        format!("{n}")
    }
}

struct Parser<'a> {
    src: &'a [u8],
    pos: usize,
    tok: Tok,
    vars: &'a BTreeMap<String, Val>,
    last_error: Option<String>,
    syntax: Option<String>,
    /// Factors being parsed, one inside the other: bounded, so that a deeply nested
    /// expression is an error rather than the end of the plugin's stack (Kruise's
    /// parser keeps its stack on the heap).
    depth: usize,
}

const MAX_DEPTH: usize = 100;

impl Parser<'_> {
    fn advance(&mut self) {
        let s = self.src;
        while self.pos < s.len() && (s[self.pos] as char).is_ascii_whitespace() {
            self.pos += 1;
        }
        let start = self.pos;
        let Some(&c) = s.get(self.pos) else {
            self.tok = Tok::End;
            return;
        };
        self.tok = if c.is_ascii_digit() || c == b'.' {
            self.read_number();
            Tok::Num(String::from_utf8_lossy(&s[start..self.pos]).into_owned())
        } else if c.is_ascii_alphabetic() {
            while self.pos < s.len() && (s[self.pos].is_ascii_alphanumeric() || s[self.pos] == b'_') {
                self.pos += 1;
            }
            Tok::Ident(String::from_utf8_lossy(&s[start..self.pos]).into_owned())
        } else {
            self.pos += 1;
            Tok::Char(c)
        };
    }

    /// Kruise's `readNumber`: digits, one '.', one exponent (with its sign), one '%',
    /// and a unit (all the letters that follow), in the order its lexer allows.
    fn read_number(&mut self) {
        let s = self.src;
        let (mut dot, mut exp, mut exp_digit, mut pct) = (false, false, false, false);
        while let Some(&c) = s.get(self.pos) {
            match c {
                b'0'..=b'9' => exp_digit |= exp,
                b'.' if !dot && !exp && !pct => dot = true,
                b'e' | b'E' if !exp && !pct => {
                    exp = true;
                    if matches!(s.get(self.pos + 1), Some(b'+' | b'-')) {
                        self.pos += 1;
                    }
                }
                b'%' if !pct => pct = true,
                c if c.is_ascii_alphabetic() && !matches!(c, b'e' | b'E') && (!exp || exp_digit) => {
                    while s.get(self.pos).is_some_and(u8::is_ascii_alphabetic) {
                        self.pos += 1;
                    }
                    return;
                }
                _ => return,
            }
            self.pos += 1;
        }
    }

    fn fail(&mut self, msg: String) -> Option<Val> {
        self.last_error = Some(msg);
        None
    }

    fn syntax_error(&mut self) -> Option<Val> {
        if self.syntax.is_none() {
            let before = &self.src[..self.pos];
            let line = 1 + before.iter().filter(|&&b| b == b'\n').count();
            let col = 1 + before.iter().rev().take_while(|&&b| b != b'\n').count();
            self.syntax = Some(format!("parse error: syntax error at line {line}, col {col}"));
        }
        None
    }

    fn expect(&mut self, c: u8) -> bool {
        if self.tok == Tok::Char(c) {
            self.advance();
            true
        } else {
            self.syntax_error();
            false
        }
    }

    fn expr(&mut self) -> Option<Val> {
        self.left_assoc(b"+-", Self::term)
    }

    fn term(&mut self) -> Option<Val> {
        self.left_assoc(b"*/", Self::factor)
    }

    /// `operand (op operand)*` for the operators `ops`, evaluated left to right (an
    /// operand that failed makes the result fail, as in Kruise's grammar actions).
    fn left_assoc(&mut self, ops: &[u8], operand: fn(&mut Self) -> Option<Val>) -> Option<Val> {
        let mut left = operand(self);
        while self.syntax.is_none() && matches!(self.tok, Tok::Char(c) if ops.contains(&c)) {
            let op = self.tok.clone();
            self.advance();
            let right = operand(self);
            left = match (left, right) {
                (Some(a), Some(b)) => self.arith(&op, a, b),
                _ => None,
            };
        }
        left
    }

    fn factor(&mut self) -> Option<Val> {
        if self.depth == MAX_DEPTH {
            self.syntax = Some(format!("parse error: the expression nests deeper than {MAX_DEPTH}"));
            return None;
        }
        self.depth += 1;
        let v = self.nested_factor();
        self.depth -= 1;
        v
    }

    fn nested_factor(&mut self) -> Option<Val> {
        match std::mem::replace(&mut self.tok, Tok::End) {
            Tok::Num(t) => {
                self.advance();
                self.literal(&t)
            }
            Tok::Char(b'-') => {
                self.advance();
                match self.factor()? {
                    Val::Num(n) => Some(Val::Num(-n)),
                    Val::Q(q) => Some(Val::Q(q.neg())),
                }
            }
            Tok::Char(b'(') => {
                self.advance();
                let v = self.expr();
                if self.expect(b')') { v } else { None }
            }
            Tok::Ident(name) => {
                self.advance();
                if self.tok != Tok::Char(b'(') {
                    let key = name.to_lowercase();
                    return match self.vars.get(&key) {
                        Some(v) => Some(v.clone()),
                        None => self.fail(format!("undefined variable: {key}")),
                    };
                }
                self.advance();
                let mut args = vec![self.expr()];
                if self.syntax.is_none() && self.tok == Tok::Char(b',') {
                    self.advance();
                    args.push(self.expr());
                }
                if self.syntax.is_some() || !self.expect(b')') {
                    return None;
                }
                self.call(&name, args)
            }
            other => {
                self.tok = other;
                self.syntax_error()
            }
        }
    }

    /// Kruise's `isQuantity` / `parseNumber`.
    fn literal(&mut self, t: &str) -> Option<Val> {
        let split = t.find(|c: char| !(c.is_ascii_digit() || ".eE+-".contains(c))).unwrap_or(t.len());
        let (num, unit) = t.split_at(split);
        if !num.is_empty() && UNITS.contains(&unit) {
            return match Quantity::parse(t) {
                Ok(q) => Some(Val::Q(q)),
                Err(e) => self.fail(e),
            };
        }
        Some(Val::Num(match t.strip_suffix('%') {
            Some(p) => p.parse::<f64>().unwrap_or(0.0) / 100.0,
            None => t.parse::<f64>().unwrap_or(0.0),
        }))
    }

    fn arith(&mut self, op: &Tok, a: Val, b: Val) -> Option<Val> {
        use Val::{Num, Q};
        match (op, a, b) {
            (Tok::Char(b'+'), Num(x), Num(y)) => Some(Num(x + y)),
            (Tok::Char(b'-'), Num(x), Num(y)) => Some(Num(x - y)),
            (Tok::Char(b'+'), x, y) => self.sum(&to_q(&x), &to_q(&y)),
            (Tok::Char(b'-'), x, y) => self.sum(&to_q(&x), &to_q(&y).neg()),
            (Tok::Char(b'*'), Num(x), Num(y)) => Some(Num(x * y)),
            (Tok::Char(b'*'), Q(_), Q(_)) => self.fail("multiplication of two quantities".into()),
            (Tok::Char(b'*'), Q(q), Num(n)) | (Tok::Char(b'*'), Num(n), Q(q)) => {
                Some(Q(q.set_milli(go_int64(q.milli_value() as f64 * n))))
            }
            (Tok::Char(b'/'), _, Q(_)) => self.fail("division by quantity".into()),
            (Tok::Char(b'/'), _, Num(0.0)) => self.fail("division by zero".into()),
            (Tok::Char(b'/'), Num(x), Num(y)) => Some(Num(x / y)),
            (Tok::Char(b'/'), Q(q), Num(n)) => Some(Q(q.set_milli(go_int64(q.milli_value() as f64 / n)))),
            _ => None,
        }
    }

    fn sum(&mut self, a: &Quantity, b: &Quantity) -> Option<Val> {
        match a.add(b) {
            Ok(q) => Some(Val::Q(q)),
            Err(e) => self.fail(e),
        }
    }

    fn call(&mut self, name: &str, args: Vec<Option<Val>>) -> Option<Val> {
        let lower = name.to_lowercase();
        if lower != "max" && lower != "min" {
            return self.fail(format!("unknown function: {name}"));
        }
        if args.len() != 2 {
            return self.fail(format!("{lower} function requires exactly 2 arguments, got {}", args.len()));
        }
        let mut args = args.into_iter();
        let (a, b) = (args.next()??, args.next()??);
        let max = lower == "max";
        let left = match (&a, &b) {
            (Val::Num(x), Val::Num(y)) => {
                return Some(Val::Num(if (max && x >= y) || (!max && x <= y) { *x } else { *y }));
            }
            _ => to_q(&a).cmp(&to_q(&b)),
        };
        let keep_left = if max { left.is_ge() } else { left.is_le() };
        Some(Val::Q(to_q(if keep_left { &a } else { &b })))
    }
}

/// Evaluates `expr` with `vars` (keys lower-case). Err: Kruise's message.
pub fn eval(expr: &str, vars: &BTreeMap<String, Val>) -> Result<Val, String> {
    let mut p = Parser { src: expr.as_bytes(), pos: 0, tok: Tok::End, vars, last_error: None, syntax: None, depth: 0 };
    p.advance();
    let v = p.expr();
    if p.syntax.is_none() && p.tok != Tok::End {
        p.syntax_error();
    }
    if let Some(s) = p.syntax {
        return Err(p.last_error.unwrap_or(s));
    }
    match v {
        None => Err(p.last_error.unwrap_or_else(|| "no result from parser".into())),
        Some(Val::Q(q)) if q.is_negative() => Err(format!("calculation result is negative: {q}")),
        Some(Val::Num(n)) if n < 0.0 => Err(format!("calculation result is negative: {}", g(n))),
        Some(v) => Ok(v),
    }
}

#[cfg(test)]
#[path = "calc_tests.rs"]
mod tests;
