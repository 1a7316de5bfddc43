//! Embeddings: the providers that turn text into vectors, the in-memory vector index recall
//! scans, and the background embedder that vectorises new entries off the hot path.
//!
//! Providers:
//! - `local`: all-MiniLM-L6-v2 run on the CPU from installed files ([`local_model`]) —
//!   semantic, offline. `auto` (the default) uses it when it is installed.
//! - `hash` (the fallback of `auto`): feature hashing of words and word pairs into a fixed
//!   number of signed buckets. It is deterministic and needs no files, but it is
//!   **lexical**: it finds the same words (and close word orders), not synonyms.
//! - `openai`: any OpenAI-compatible `/embeddings` endpoint (OpenAI, Ollama, vLLM,
//!   llama.cpp). Semantic, at the cost of a network call per batch.
//!
//! Each stored vector records its provider and model; entries whose vector came from
//! another model are re-embedded by the background worker (and by `cairn memory reindex`).

mod index;
pub mod local_model;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use serde::{Deserialize, Serialize};

pub use index::{ScanFilter, VectorIndex};

/// Which embedding provider to use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ProviderKind {
    /// The local model when it is installed, `hash` otherwise (the default).
    Auto,
    /// The local sentence model (all-MiniLM-L6-v2); lexical recall when it cannot load.
    Local,
    /// No embeddings: recall is BM25 only.
    None,
    /// Offline feature hashing (lexical).
    Hash,
    /// An OpenAI-compatible `/embeddings` endpoint.
    Openai,
}

/// Embedding settings (`memory.embeddings:` in `cairn.yaml`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct EmbeddingConfig {
    /// `auto` (default: `local` when the model is installed, else `hash`), `local`, `hash`,
    /// `openai` or `none`.
    pub provider: ProviderKind,
    /// Where local models are installed (empty: `$XDG_DATA_HOME/cairn/models`, i.e.
    /// `~/.local/share/cairn/models`); the model is read from `<models_dir>/all-MiniLM-L6-v2`.
    pub models_dir: PathBuf,
    /// The model name sent to an `openai` endpoint (e.g. `text-embedding-3-small`,
    /// `nomic-embed-text`); ignored by `hash`.
    pub model: String,
    /// Dimensions of `hash` vectors (default 256).
    pub dims: usize,
    /// Base URL of an `openai` endpoint, up to and including `/v1`.
    pub url: String,
    /// Environment variable holding the API key (none sends no `Authorization`).
    pub api_key_env: Option<String>,
    /// Texts per provider call (default 32).
    pub batch_size: usize,
    /// Timeout of one provider call in ms (default 30000).
    pub timeout_ms: u64,
    /// Rows kept in the embedding cache; the least recently used are evicted (default 50000).
    pub cache_entries: usize,
}

impl Default for EmbeddingConfig {
    fn default() -> Self {
        Self {
            provider: ProviderKind::Auto,
            models_dir: PathBuf::new(),
            model: "text-embedding-3-small".into(),
            dims: 256,
            url: "https://api.openai.com/v1".into(),
            api_key_env: Some("OPENAI_API_KEY".into()),
            batch_size: 32,
            timeout_ms: 30_000,
            cache_entries: 50_000,
        }
    }
}

/// Why texts could not be embedded.
#[derive(Debug, Clone, thiserror::Error)]
pub enum EmbedError {
    /// The provider could not be reached or answered with an error.
    #[error("embedding provider {provider}: {message}")]
    Provider {
        /// Provider name.
        provider: String,
        /// What went wrong.
        message: String,
    },
}

/// Something that turns texts into vectors.
pub trait EmbeddingProvider: Send + Sync {
    /// The provider's name (`hash`, `openai`), recorded with every vector.
    fn provider(&self) -> &str;
    /// The model, recorded with every vector; a change re-embeds.
    fn model(&self) -> &str;
    /// One vector per text, in order.
    fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, EmbedError>;
    /// [`embed`](Self::embed) for stored texts nobody waits for: a provider that computes
    /// on this machine does it at a lower priority, leaving the CPU to queries and turns.
    fn embed_in_background(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, EmbedError> {
        self.embed(texts)
    }
    /// Whether similar vectors mean similar meaning (a model), not shared words (hashing):
    /// recall lets a semantic cosine lead its ranking.
    fn semantic(&self) -> bool {
        true
    }
}

/// The embedder a configuration resolves to, and what an operator should know about it.
pub struct ChosenProvider {
    /// The provider, or none when recall is lexical (BM25) only.
    pub provider: Option<Arc<dyn EmbeddingProvider>>,
    /// Why the provider is not the one asked for (a model absent or broken), with how to
    /// fix it; none when it is.
    pub warning: Option<String>,
    /// Under `auto`, what is wrong with the local model `hash` stands in for (`the local
    /// embedding model is not installed in DIR`); none when nothing stands in.
    pub stands_in_for: Option<String>,
}

/// The provider `config` describes. `auto` takes the local model when its files are
/// installed and `hash` otherwise; an explicit `local` whose model cannot load leaves recall
/// lexical (BM25 only). Either way the warning names the file and the install command.
pub fn provider_from_config(config: &EmbeddingConfig) -> ChosenProvider {
    let chosen = |provider: Arc<dyn EmbeddingProvider>| ChosenProvider {
        provider: Some(provider),
        warning: None,
        stands_in_for: None,
    };
    match config.provider {
        ProviderKind::None => ChosenProvider {
            provider: None,
            warning: None,
            stands_in_for: None,
        },
        ProviderKind::Hash => chosen(Arc::new(HashEmbedder::new(config.dims))),
        ProviderKind::Openai => chosen(Arc::new(OpenAiEmbedder::new(config))),
        ProviderKind::Local | ProviderKind::Auto => {
            let dir = local_model::model_dir(&config.models_dir);
            let missing = local_model::missing_files(&dir);
            if config.provider == ProviderKind::Auto && !missing.is_empty() {
                let what = if missing.len() == cairn_encoder::MODEL_FILES.len() {
                    format!(
                        "the local embedding model is not installed in {}",
                        dir.display()
                    )
                } else {
                    format!(
                        "the local embedding model in {} lacks {}",
                        dir.display(),
                        missing.join(", ")
                    )
                };
                return ChosenProvider {
                    provider: Some(Arc::new(HashEmbedder::new(config.dims))),
                    warning: Some(format!(
                        "{what}: recall is lexical (hash embeddings, no paraphrase); {}",
                        local_model::INSTALL_HINT
                    )),
                    stands_in_for: Some(what),
                };
            }
            match local_model::LocalModelEmbedder::load(&dir) {
                Ok(model) => chosen(Arc::new(model)),
                Err(e) => {
                    let auto = config.provider == ProviderKind::Auto;
                    ChosenProvider {
                        provider: auto.then(|| Arc::new(HashEmbedder::new(config.dims)) as Arc<_>),
                        warning: Some(format!(
                            "{e}; {}; recall is lexical meanwhile",
                            local_model::INSTALL_HINT
                        )),
                        stands_in_for: auto.then(|| e.to_string()),
                    }
                }
            }
        }
    }
}

/// Offline, deterministic, lexical embeddings by feature hashing.
pub struct HashEmbedder {
    dims: usize,
    model: String,
}

impl HashEmbedder {
    /// Vectors of `dims` dimensions (at least 8).
    pub fn new(dims: usize) -> Self {
        let dims = dims.max(8);
        Self {
            dims,
            model: format!("hash-v1-{dims}"),
        }
    }

    /// The vector of one text: words and adjacent word pairs hashed into signed buckets,
    /// weighted by log term frequency, L2-normalised.
    pub fn vector(&self, text: &str) -> Vec<f32> {
        let words = hash_v1_terms(text);
        let mut counts: HashMap<u64, f32> = HashMap::new();
        for word in &words {
            *counts.entry(fnv1a(word.as_bytes())).or_default() += 1.0;
        }
        for pair in words.windows(2) {
            let key = fnv1a(format!("{} {}", pair[0], pair[1]).as_bytes());
            *counts.entry(key).or_default() += 0.5;
        }
        let mut vector = vec![0f32; self.dims];
        for (hash, count) in counts {
            let bucket = (hash % self.dims as u64) as usize;
            let sign = if (hash >> 63) & 1 == 1 { -1.0 } else { 1.0 };
            vector[bucket] += sign * (1.0 + count.ln());
        }
        normalise(&mut vector);
        vector
    }
}

/// 64-bit FNV-1a: a stable hash (unlike std's), so hash vectors never change between builds.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, byte| {
        (hash ^ u64::from(*byte)).wrapping_mul(0x0100_0000_01b3)
    })
}

impl EmbeddingProvider for HashEmbedder {
    fn provider(&self) -> &str {
        "hash"
    }

    fn model(&self) -> &str {
        &self.model
    }

    fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, EmbedError> {
        Ok(texts.iter().map(|t| self.vector(t)).collect())
    }

    fn semantic(&self) -> bool {
        false
    }
}

/// An OpenAI-compatible `/embeddings` endpoint.
pub struct OpenAiEmbedder {
    url: String,
    model: String,
    api_key: Option<String>,
    agent: ureq::Agent,
}

impl OpenAiEmbedder {
    /// A client for the endpoint in `config`; the API key is read from its env var now.
    pub fn new(config: &EmbeddingConfig) -> Self {
        let agent = ureq::Agent::config_builder()
            .timeout_global(Some(Duration::from_millis(config.timeout_ms.max(1))))
            .http_status_as_error(false)
            .build()
            .into();
        Self {
            url: format!("{}/embeddings", config.url.trim_end_matches('/')),
            model: config.model.clone(),
            api_key: config
                .api_key_env
                .as_deref()
                .and_then(|name| std::env::var(name).ok())
                .filter(|key| !key.is_empty()),
            agent,
        }
    }

    fn error(&self, message: impl Into<String>) -> EmbedError {
        EmbedError::Provider {
            provider: format!("openai ({})", self.url),
            message: message.into(),
        }
    }
}

#[derive(Deserialize)]
struct EmbeddingsResponse {
    data: Vec<EmbeddingDatum>,
}

#[derive(Deserialize)]
struct EmbeddingDatum {
    index: usize,
    embedding: Vec<f32>,
}

impl EmbeddingProvider for OpenAiEmbedder {
    fn provider(&self) -> &str {
        "openai"
    }

    fn model(&self) -> &str {
        &self.model
    }

    fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, EmbedError> {
        if texts.is_empty() {
            return Ok(Vec::new());
        }
        let body = serde_json::json!({"model": self.model, "input": texts}).to_string();
        let mut request = self
            .agent
            .post(&self.url)
            .header("Content-Type", "application/json");
        if let Some(key) = &self.api_key {
            request = request.header("Authorization", format!("Bearer {key}"));
        }
        let mut response = request.send(body).map_err(|e| self.error(e.to_string()))?;
        let status = response.status();
        let text = response
            .body_mut()
            .read_to_string()
            .map_err(|e| self.error(format!("cannot read the answer: {e}")))?;
        if !status.is_success() {
            let excerpt: String = text.chars().take(300).collect();
            return Err(self.error(format!("HTTP {status}: {excerpt}")));
        }
        let parsed: EmbeddingsResponse = serde_json::from_str(&text)
            .map_err(|e| self.error(format!("unexpected answer ({e})")))?;
        let mut vectors = vec![Vec::new(); texts.len()];
        for datum in parsed.data {
            let Some(slot) = vectors.get_mut(datum.index) else {
                return Err(self.error(format!("answer has index {} out of range", datum.index)));
            };
            *slot = datum.embedding;
        }
        if let Some(missing) = vectors.iter().position(Vec::is_empty) {
            return Err(self.error(format!("answer has no vector for input {missing}")));
        }
        for vector in &mut vectors {
            normalise(vector);
        }
        Ok(vectors)
    }
}

/// Scale `vector` to unit length (left as is when it is all zeros).
pub fn normalise(vector: &mut [f32]) {
    let norm = vector.iter().map(|x| x * x).sum::<f32>().sqrt();
    if norm > 0.0 {
        for x in vector {
            *x /= norm;
        }
    }
}

/// `vector` less `weight` times `mean`, scaled back to unit length: a sentence model's
/// vectors all lean one common way, so two unrelated sentences still look somewhat alike;
/// with that direction taken out, what sets a memory apart decides its likeness.
pub fn centre(vector: &[f32], mean: &[f32], weight: f32) -> Vec<f32> {
    let mut centred: Vec<f32> = vector
        .iter()
        .zip(mean)
        .map(|(value, common)| value - weight * common)
        .collect();
    normalise(&mut centred);
    centred
}

/// Cosine similarity of two unit vectors (their dot product); 0 when dimensions differ.
pub fn cosine(a: &[f32], b: &[f32]) -> f32 {
    if a.len() != b.len() {
        return 0.0;
    }
    dot(a, b)
}

/// The dot product of `a` and `b` (f32s, or a vector's int8 codes, which the index holds),
/// which must be as long as `a`. Eight running sums instead of one: the compiler turns them into
/// SIMD lanes (a single float sum must be added in order, one element at a time).
pub(crate) fn dot<T: Copy + Into<f32>>(a: &[f32], b: &[T]) -> f32 {
    const LANES: usize = 8;
    let mut sums = [0.0f32; LANES];
    let (a_body, a_tail) = a.split_at(a.len() - a.len() % LANES);
    let (b_body, b_tail) = b.split_at(a_body.len());
    for (x, y) in a_body.chunks_exact(LANES).zip(b_body.chunks_exact(LANES)) {
        for ((sum, x), y) in sums.iter_mut().zip(x).zip(y) {
            *sum += x * (*y).into();
        }
    }
    let tail: f32 = a_tail
        .iter()
        .zip(b_tail)
        .map(|(x, y)| x * (*y).into())
        .sum();
    sums.iter().sum::<f32>() + tail
}

/// Wakes the background embedder when entries are stored, and tells it to stop.
#[derive(Default)]
pub struct EmbedSignal {
    state: Mutex<(bool, bool)>,
    changed: Condvar,
}

impl EmbedSignal {
    /// New entries wait to be embedded.
    pub fn notify(&self) {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        state.0 = true;
        self.changed.notify_all();
    }

    /// The embedder should finish.
    pub fn stop(&self) {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        state.1 = true;
        self.changed.notify_all();
    }

    /// Wait until notified, stopped or `timeout`; returns false once stopped.
    pub fn wait(&self, timeout: Duration) -> bool {
        let state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let (mut state, _) = self
            .changed
            .wait_timeout_while(state, timeout, |s| !s.0 && !s.1)
            .unwrap_or_else(|p| p.into_inner());
        state.0 = false;
        !state.1
    }

    /// Whether stop was asked.
    pub fn stopped(&self) -> bool {
        self.state.lock().unwrap_or_else(|p| p.into_inner()).1
    }
}

/// The words hash-v1 vectors are made of: lower-case runs of letters and digits without the
/// stop words recall dropped when hash-v1 was named. Frozen, as vectors stored under that
/// name are compared with the vectors of later queries (recall's own list has grown since).
fn hash_v1_terms(text: &str) -> Vec<String> {
    const STOPWORDS: &[&str] = &[
        "a", "an", "and", "are", "as", "at", "be", "but", "by", "did", "do", "does", "for", "from",
        "had", "has", "have", "he", "her", "his", "i", "in", "is", "it", "its", "me", "my", "of",
        "on", "or", "our", "she", "so", "that", "the", "their", "them", "they", "this", "to",
        "was", "we", "were", "what", "when", "where", "which", "who", "why", "will", "with", "you",
        "your",
    ];
    super::recall::words_without(text, STOPWORDS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auto_names_the_file_a_half_installed_model_lacks() {
        let models = tempfile::tempdir().expect("models dir");
        let dir = local_model::model_dir(models.path());
        std::fs::create_dir_all(&dir).expect("model dir");
        let config = EmbeddingConfig {
            provider: ProviderKind::Auto,
            models_dir: models.path().to_path_buf(),
            ..EmbeddingConfig::default()
        };
        let absent = provider_from_config(&config).warning.expect("a warning");
        assert!(absent.contains("is not installed in"), "{absent}");
        for name in ["config.json", "model.safetensors"] {
            std::fs::write(dir.join(name), b"{}").expect("write");
        }
        let half = provider_from_config(&config).warning.expect("a warning");
        assert!(
            half.contains("lacks tokenizer.json: recall is lexical ("),
            "{half}"
        );
        assert!(!half.contains("  "), "no run of blanks: {half}");
    }

    #[test]
    fn centring_takes_out_what_every_vector_shares() {
        let common = [0.8, 0.0, 0.0];
        let mut a = vec![0.8, 0.6, 0.0];
        let mut b = vec![0.8, 0.0, 0.6];
        normalise(&mut a);
        normalise(&mut b);
        assert!(cosine(&a, &b) > 0.6, "alike through what they share");
        let (a, b) = (centre(&a, &common, 1.0), centre(&b, &common, 1.0));
        assert!(cosine(&a, &b).abs() < 1e-6, "unrelated once it is out");
        assert!((cosine(&a, &a) - 1.0).abs() < 1e-6, "still unit length");
        assert_eq!(centre(&[0.5, 0.5], &[0.0, 0.0], 1.0)[0], 0.5f32.sqrt());
    }
    #[test]
    fn hash_vectors_are_deterministic_and_lexical() {
        let embedder = HashEmbedder::new(256);
        let a = embedder.vector("Alice moved to Berlin last spring");
        assert_eq!(a, embedder.vector("Alice moved to Berlin last spring"));
        let near = embedder.vector("Alice moved to Berlin in spring");
        let far = embedder.vector("the build cache is corrupted");
        assert!(cosine(&a, &near) > 0.6, "{}", cosine(&a, &near));
        assert!(cosine(&a, &far) < 0.3, "{}", cosine(&a, &far));
    }
}
