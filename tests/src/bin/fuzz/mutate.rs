//! Byte-level mutations of corpus entries: small edits near real inputs reach the paths
//! random bytes never do (a valid manifest with one bad field, a payload nested once more).

/// A tiny deterministic generator (xorshift64*), seeded by the case: the same seed gives
/// the same mutation, so a failing case is reproduced from its seed.
struct Dice(u64);

impl Dice {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            0
        } else {
            (self.next() % n as u64) as usize
        }
    }
}

/// Bytes that mean something to the formats under test.
const TOKENS: &[&[u8]] = &[
    b"\0",
    b"\xff",
    b"\xc3",
    b"\xed\xa0\x80",
    b"\"",
    b"'",
    b"\\",
    b"\\u0000",
    b"\\ud800",
    b"{",
    b"}",
    b"[",
    b"]",
    b":",
    b",",
    b"-",
    b"*",
    b"?",
    b"/",
    b"~1",
    b"#",
    b"\n",
    b"\r\n",
    b"\t",
    b"  ",
    b"&a",
    b"*a",
    b"!!",
    b"%",
    b"|",
    b">",
    b"null",
    b"true",
    b"1e999",
    b"-0",
    b"18446744073709551616",
    b"NEAR",
    b"AND",
    b"OR",
    b"NOT",
    b"^",
    b"(",
    b")",
    b"L",
    b"W",
    b"MON",
    b"JAN",
    b"---",
    b"...",
];

/// Apply one to eight random edits to `input`, drawing splices from `corpus`.
pub fn mutate(input: &[u8], corpus: &[Vec<u8>], seed: u64) -> Vec<u8> {
    let mut dice = Dice(seed | 1);
    let mut out = input.to_vec();
    for _ in 0..=dice.below(8) {
        let at = dice.below(out.len() + 1);
        match dice.below(8) {
            0 if !out.is_empty() => {
                let i = dice.below(out.len());
                out[i] ^= 1 << dice.below(8);
            }
            1 => {
                let token = TOKENS[dice.below(TOKENS.len())];
                out.splice(at..at, token.iter().copied());
            }
            2 if !out.is_empty() => {
                let end = (at + 1 + dice.below(16)).min(out.len());
                out.drain(at.min(end)..end);
            }
            3 if !out.is_empty() => {
                // Repeat a slice: deeper nesting, longer fields.
                let start = dice.below(out.len());
                let end = (start + 1 + dice.below(32)).min(out.len());
                let piece = out[start..end].to_vec();
                let most = if dice.below(16) == 0 { 5_000 } else { 8 };
                let times = 1 + dice.below(most);
                for _ in 0..times {
                    out.splice(at..at, piece.iter().copied());
                }
            }
            4 if !corpus.is_empty() => {
                let other = &corpus[dice.below(corpus.len())];
                let start = dice.below(other.len() + 1);
                let end = (start + dice.below(64)).min(other.len());
                out.splice(at..at, other[start..end].iter().copied());
            }
            5 => out.truncate(at),
            6 if !out.is_empty() => {
                let i = dice.below(out.len());
                out[i] = b"0123456789"[dice.below(10)];
            }
            _ => {
                let byte = dice.next() as u8;
                out.insert(at, byte);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_seed_gives_the_same_mutation() {
        let corpus = vec![b"id: a\nversion: 1.0.0\n".to_vec()];
        assert_eq!(
            mutate(&corpus[0], &corpus, 7),
            mutate(&corpus[0], &corpus, 7)
        );
        assert!((0..50).any(|seed| mutate(&corpus[0], &corpus, seed) != corpus[0]));
    }
}
