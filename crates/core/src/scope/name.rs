//! Validated scope names.

use std::fmt;
use std::str::FromStr;
use std::sync::LazyLock;

use regex::Regex;
use serde::{Deserialize, Serialize};

use super::ScopeError;

/// The shared scope every conversation can see.
pub const PUBLIC_SCOPE: &str = "public";

/// Maximum length of a scope name in characters (not bytes).
pub const MAX_SCOPE_NAME_CHARS: usize = 64;

static SCOPE_NAME_RE: LazyLock<Regex> = LazyLock::new(|| {
    // A literal pattern: a failure here is a build defect caught by every test.
    #[allow(clippy::expect_used)]
    Regex::new(r"^[A-Za-z0-9\x{4e00}-\x{9fff}_-]{1,64}$").expect("scope name regex compiles")
});

/// A scope name matching `^[A-Za-z0-9\u4e00-\u9fff_-]{1,64}$`.
///
/// The charset excludes quotes, spaces and control characters, so a scope can never break a
/// filter expression or a log line; `sql_literal` still escapes as defence in depth.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct ScopeName(String);

impl ScopeName {
    /// Validates `value` exactly as given (no trimming: a map value with spaces is a mistake
    /// worth a warning, not a silent fix).
    pub fn parse(value: &str) -> Result<ScopeName, ScopeError> {
        if SCOPE_NAME_RE.is_match(value) {
            return Ok(ScopeName(value.to_owned()));
        }
        let reason = if value.is_empty() {
            "empty"
        } else if value.chars().count() > MAX_SCOPE_NAME_CHARS {
            "longer than 64 characters"
        } else {
            "only letters A-Z a-z, digits, CJK ideographs (U+4E00-U+9FFF), '_' and '-' are allowed"
        };
        Err(ScopeError::InvalidScopeName {
            value: value.to_owned(),
            reason,
        })
    }

    /// The `public` scope.
    pub fn public() -> ScopeName {
        ScopeName(PUBLIC_SCOPE.to_owned())
    }

    /// For names built by this crate from a known-valid alphabet (e.g. `c_<hex>`).
    pub(crate) fn from_trusted(value: String) -> ScopeName {
        debug_assert!(SCOPE_NAME_RE.is_match(&value), "invalid trusted scope");
        ScopeName(value)
    }

    /// Whether this is the shared `public` scope.
    pub fn is_public(&self) -> bool {
        self.0 == PUBLIC_SCOPE
    }

    /// The name as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for ScopeName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl AsRef<str> for ScopeName {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl FromStr for ScopeName {
    type Err = ScopeError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        ScopeName::parse(s)
    }
}

impl TryFrom<String> for ScopeName {
    type Error = ScopeError;
    fn try_from(value: String) -> Result<Self, Self::Error> {
        ScopeName::parse(&value)
    }
}

impl From<ScopeName> for String {
    fn from(value: ScopeName) -> String {
        value.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn valid_names() {
        let sixty_four = "a".repeat(64);
        let cjk_64 = "家".repeat(64);
        for ok in [
            "家人",
            "public",
            "work_team-2",
            "A",
            "恋爱",
            sixty_four.as_str(),
            cjk_64.as_str(),
        ] {
            let name = ScopeName::parse(ok).unwrap_or_else(|e| panic!("{ok}: {e}"));
            assert_eq!(name.as_str(), ok);
            assert_eq!(name.to_string(), ok);
        }
    }

    #[test]
    fn invalid_names() {
        let sixty_five = "a".repeat(65);
        let cjk_65 = "家".repeat(65);
        for bad in [
            "",
            "\"quoted\"",
            "has space",
            "public'--",
            sixty_five.as_str(),
            cjk_65.as_str(),
            "家人!",
            "😀",
            "fam😀",
            "a\nb",
            "public\n",
            "ａ", // full-width letter
            "é",
        ] {
            let err = ScopeName::parse(bad).unwrap_err();
            assert!(
                matches!(err, ScopeError::InvalidScopeName { .. }),
                "{bad:?}: {err:?}"
            );
        }
        assert!(ScopeName::parse(&sixty_five)
            .unwrap_err()
            .to_string()
            .contains("64"));
    }

    #[test]
    fn public_helpers_and_serde() {
        assert!(ScopeName::public().is_public());
        assert!(ScopeName::parse("public").unwrap().is_public());
        assert!(!ScopeName::parse("Public").unwrap().is_public());
        let json = serde_json::to_string(&ScopeName::parse("家人").unwrap()).unwrap();
        assert_eq!(json, "\"家人\"");
        assert!(serde_json::from_str::<ScopeName>("\"a b\"").is_err());
        assert_eq!(
            serde_json::from_str::<ScopeName>("\"work\"").unwrap(),
            ScopeName::parse("work").unwrap()
        );
    }
}
