//! Host bindings of the plugin contract, one module per frozen WIT API version.
//!
//! A manifest's `api` requirement picks the newest version here that satisfies it; a
//! later API lives beside `v0_1` and older plugins keep loading with their own bindings.

use semver::{Version, VersionReq};
use serde::Serialize;

pub mod v0_1;

/// A plugin API version this host implements.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum ApiVersion {
    /// `cairn:plugin@0.1.0`, WIT in `wit/v0.1`.
    #[serde(rename = "0.1.0")]
    V0_1,
}

/// Every API version this host supports, oldest first.
pub const SUPPORTED_APIS: &[ApiVersion] = &[ApiVersion::V0_1];

impl ApiVersion {
    /// The semver of the WIT package.
    pub fn version(self) -> Version {
        match self {
            ApiVersion::V0_1 => Version::new(0, 1, 0),
        }
    }

    /// The newest supported version matching a manifest's requirement.
    pub fn newest_matching(requirement: &VersionReq) -> Option<Self> {
        SUPPORTED_APIS
            .iter()
            .rev()
            .copied()
            .find(|api| requirement.matches(&api.version()))
    }
}
