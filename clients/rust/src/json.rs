//! A small JSON reader (std only) for the command's input and the tests'
//! golden file: it keeps number literals as written, so a token id is
//! checked as the user typed it and a 64-bit hash loses no precision.

use std::fmt;

/// A JSON value. Numbers keep their literal text.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// `null`
    Null,
    /// `true` or `false`
    Bool(bool),
    /// A number, as written (e.g. `"12"`, `"1.5"`, `"-3e2"`).
    Number(String),
    /// A string, unescaped.
    String(String),
    /// An array.
    Array(Vec<Value>),
    /// An object's members in input order.
    Object(Vec<(String, Value)>),
}

impl Value {
    /// The member `key` of an object (`None` for a missing key or a non-object).
    pub fn get(&self, key: &str) -> Option<&Value> {
        match self {
            Value::Object(m) => m.iter().find(|(k, _)| k == key).map(|(_, v)| v),
            _ => None,
        }
    }
}

/// A syntax error at a byte offset of the input.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SyntaxError {
    /// Byte offset of the offending input.
    pub offset: usize,
    /// What was expected or found.
    pub msg: String,
}

impl fmt::Display for SyntaxError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} at byte {}", self.msg, self.offset)
    }
}

impl std::error::Error for SyntaxError {}

/// Parses one JSON value; only white space may follow it.
pub fn parse(text: &str) -> Result<Value, SyntaxError> {
    let mut p = Parser { b: text.as_bytes(), i: 0, depth: 0 };
    let v = p.value()?;
    p.ws();
    if p.i != p.b.len() {
        return Err(p.err("unexpected data after the JSON value"));
    }
    Ok(v)
}

/// Nesting deeper than this is refused rather than overflowing the stack.
const MAX_DEPTH: usize = 512;

struct Parser<'a> {
    b: &'a [u8],
    i: usize,
    depth: usize,
}

impl<'a> Parser<'a> {
    fn err(&self, msg: &str) -> SyntaxError {
        SyntaxError { offset: self.i, msg: msg.to_string() }
    }

    fn ws(&mut self) {
        while self.i < self.b.len() && matches!(self.b[self.i], b' ' | b'\t' | b'\n' | b'\r') {
            self.i += 1;
        }
    }

    fn lit(&mut self, word: &str, v: Value) -> Result<Value, SyntaxError> {
        if self.b[self.i..].starts_with(word.as_bytes()) {
            self.i += word.len();
            Ok(v)
        } else {
            Err(self.err("invalid literal"))
        }
    }

    fn value(&mut self) -> Result<Value, SyntaxError> {
        self.ws();
        match self.b.get(self.i) {
            None => Err(self.err("unexpected end of input")),
            Some(b'n') => self.lit("null", Value::Null),
            Some(b't') => self.lit("true", Value::Bool(true)),
            Some(b'f') => self.lit("false", Value::Bool(false)),
            Some(b'"') => self.string().map(Value::String),
            Some(b'[') => self.nested(|p| {
                let mut items = Vec::new();
                p.i += 1;
                p.ws();
                if p.b.get(p.i) == Some(&b']') {
                    p.i += 1;
                    return Ok(Value::Array(items));
                }
                loop {
                    items.push(p.value()?);
                    p.ws();
                    match p.b.get(p.i) {
                        Some(b',') => p.i += 1,
                        Some(b']') => {
                            p.i += 1;
                            return Ok(Value::Array(items));
                        }
                        _ => return Err(p.err("expected ',' or ']' in an array")),
                    }
                }
            }),
            Some(b'{') => self.nested(|p| {
                let mut members = Vec::new();
                p.i += 1;
                p.ws();
                if p.b.get(p.i) == Some(&b'}') {
                    p.i += 1;
                    return Ok(Value::Object(members));
                }
                loop {
                    p.ws();
                    if p.b.get(p.i) != Some(&b'"') {
                        return Err(p.err("expected a string key in an object"));
                    }
                    let k = p.string()?;
                    p.ws();
                    if p.b.get(p.i) != Some(&b':') {
                        return Err(p.err("expected ':' after an object key"));
                    }
                    p.i += 1;
                    members.push((k, p.value()?));
                    p.ws();
                    match p.b.get(p.i) {
                        Some(b',') => p.i += 1,
                        Some(b'}') => {
                            p.i += 1;
                            return Ok(Value::Object(members));
                        }
                        _ => return Err(p.err("expected ',' or '}' in an object")),
                    }
                }
            }),
            Some(c) if *c == b'-' || c.is_ascii_digit() => self.number(),
            Some(_) => Err(self.err("unexpected character")),
        }
    }

    fn nested(&mut self, f: impl FnOnce(&mut Self) -> Result<Value, SyntaxError>) -> Result<Value, SyntaxError> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(self.err("nesting too deep"));
        }
        let v = f(self);
        self.depth -= 1;
        v
    }

    fn digits(&mut self) -> usize {
        let s = self.i;
        while self.i < self.b.len() && self.b[self.i].is_ascii_digit() {
            self.i += 1;
        }
        self.i - s
    }

    fn number(&mut self) -> Result<Value, SyntaxError> {
        let start = self.i;
        if self.b[self.i] == b'-' {
            self.i += 1;
        }
        let int_start = self.i;
        if self.digits() == 0 {
            return Err(self.err("invalid number"));
        }
        if self.b[int_start] == b'0' && self.i - int_start > 1 {
            return Err(SyntaxError { offset: int_start, msg: "invalid number (leading zero)".into() });
        }
        if self.b.get(self.i) == Some(&b'.') {
            self.i += 1;
            if self.digits() == 0 {
                return Err(self.err("invalid number"));
            }
        }
        if matches!(self.b.get(self.i), Some(b'e') | Some(b'E')) {
            self.i += 1;
            if matches!(self.b.get(self.i), Some(b'+') | Some(b'-')) {
                self.i += 1;
            }
            if self.digits() == 0 {
                return Err(self.err("invalid number"));
            }
        }
        // The slice is ASCII by construction.
        Ok(Value::Number(String::from_utf8_lossy(&self.b[start..self.i]).into_owned()))
    }

    fn hex4(&mut self) -> Result<u32, SyntaxError> {
        let h = self.b.get(self.i..self.i + 4).ok_or_else(|| self.err("short \\u escape"))?;
        let s = std::str::from_utf8(h).map_err(|_| self.err("invalid \\u escape"))?;
        let v = u32::from_str_radix(s, 16).map_err(|_| self.err("invalid \\u escape"))?;
        self.i += 4;
        Ok(v)
    }

    fn string(&mut self) -> Result<String, SyntaxError> {
        self.i += 1; // the opening quote
        let mut out = String::new();
        loop {
            let run = self.i;
            while self.i < self.b.len() && !matches!(self.b[self.i], b'"' | b'\\') && self.b[self.i] >= 0x20 {
                self.i += 1;
            }
            // The input is a &str, and the run ends at an ASCII byte, so it is valid UTF-8.
            out.push_str(std::str::from_utf8(&self.b[run..self.i]).map_err(|_| self.err("invalid UTF-8"))?);
            match self.b.get(self.i) {
                None => return Err(self.err("unterminated string")),
                Some(b'"') => {
                    self.i += 1;
                    return Ok(out);
                }
                Some(b'\\') => {
                    self.i += 1;
                    let c = *self.b.get(self.i).ok_or_else(|| self.err("unterminated string"))?;
                    self.i += 1;
                    match c {
                        b'"' => out.push('"'),
                        b'\\' => out.push('\\'),
                        b'/' => out.push('/'),
                        b'b' => out.push('\u{8}'),
                        b'f' => out.push('\u{c}'),
                        b'n' => out.push('\n'),
                        b'r' => out.push('\r'),
                        b't' => out.push('\t'),
                        b'u' => {
                            let mut cp = self.hex4()?;
                            if (0xD800..0xDC00).contains(&cp) && self.b[self.i..].starts_with(b"\\u") {
                                self.i += 2;
                                let lo = self.hex4()?;
                                if !(0xDC00..0xE000).contains(&lo) {
                                    return Err(self.err("invalid surrogate pair"));
                                }
                                cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                            }
                            out.push(char::from_u32(cp).ok_or_else(|| self.err("invalid \\u escape"))?);
                        }
                        _ => return Err(self.err("invalid escape")),
                    }
                }
                Some(_) => return Err(self.err("control character in a string")),
            }
        }
    }
}

/// The token ids of a JSON array of integers in `0..=u32::MAX`. The error
/// names the first bad item (0-based) as written, or says what the input is
/// instead of an array.
pub fn token_ids(text: &str) -> Result<Vec<u32>, String> {
    let v = parse(text).map_err(|e| format!("stdin: expected a JSON array of token ids: {e}"))?;
    let items = match v {
        Value::Array(items) => items,
        _ => return Err("stdin: expected a JSON array of token ids".to_string()),
    };
    let mut ids = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let bad = |shown: String| format!("token id #{i} {shown}: must be an integer between 0 and {}", u32::MAX);
        match item {
            Value::Number(lit) => match lit.parse::<u32>() {
                Ok(t) if !lit.starts_with('+') => ids.push(t),
                _ => return Err(bad(format!("\"{lit}\""))),
            },
            Value::String(s) => return Err(bad(format!("{s:?} (a JSON string)"))),
            other => return Err(bad(format!("{other:?}"))),
        }
    }
    Ok(ids)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_nested_values_keeping_number_literals() {
        let v = parse(r#" {"a": [1, -2.5e3, "x\u00e9\n"], "b": null, "c": true} "#).unwrap();
        assert_eq!(
            v.get("a"),
            Some(&Value::Array(vec![
                Value::Number("1".into()),
                Value::Number("-2.5e3".into()),
                Value::String("xé\n".into())
            ]))
        );
        assert_eq!(v.get("b"), Some(&Value::Null));
        assert_eq!(v.get("c"), Some(&Value::Bool(true)));
    }

    #[test]
    fn refuses_malformed_input_with_an_offset() {
        for bad in ["[1,", "[1 2]", "[01]", "{\"a\" 1}", "[1] x", "\"abc", "[1.]", "-", ""] {
            assert!(parse(bad).is_err(), "{bad:?} parsed");
        }
        assert_eq!(parse("[1] x").unwrap_err().offset, 4);
    }

    #[test]
    fn token_ids_refuse_what_is_not_a_u32_naming_the_item() {
        assert_eq!(token_ids("[0, 4294967295]").unwrap(), vec![0, u32::MAX]);
        let cases = [
            ("[1, -1]", "token id #1 \"-1\": must be an integer between 0 and 4294967295"),
            ("[4294967296]", "token id #0 \"4294967296\": must be an integer between 0 and 4294967295"),
            ("[1.5]", "token id #0 \"1.5\": must be an integer between 0 and 4294967295"),
            ("[1e2]", "token id #0 \"1e2\": must be an integer between 0 and 4294967295"),
            ("[true]", "token id #0 Bool(true): must be an integer between 0 and 4294967295"),
            ("[\"7\"]", "token id #0 \"7\" (a JSON string): must be an integer between 0 and 4294967295"),
            ("{}", "stdin: expected a JSON array of token ids"),
        ];
        for (input, want) in cases {
            assert_eq!(token_ids(input).unwrap_err(), want, "{input}");
        }
    }
}
