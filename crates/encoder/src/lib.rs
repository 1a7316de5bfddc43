//! A sentence encoder on the CPU: a BERT model such as all-MiniLM-L6-v2 read from a local
//! directory (`config.json`, `model.safetensors`, `tokenizer.json`), run with candle, the
//! hidden states mean-pooled over the real tokens and L2-normalised — what
//! sentence-transformers computes, so the vectors match the published ones.
//!
//! Nothing is downloaded: the files are installed beforehand (`cargo xtask install-model`)
//! and a missing or corrupt file is an [`EncoderError`] naming it.

mod bert;
mod linear;

use std::path::{Path, PathBuf};

use candle_core::{DType, Device, Tensor};
use candle_nn::VarBuilder;
use rayon::prelude::*;
use tokenizers::{PaddingParams, PaddingStrategy, Tokenizer, TruncationParams};

pub use bert::BertConfig;

/// The files a model directory holds.
pub const MODEL_FILES: [&str; 3] = ["config.json", "model.safetensors", "tokenizer.json"];

/// Texts encoded in one forward pass: sorted by length first, so that each pass pads little.
/// Eight keep the matrix products large enough for the SIMD kernels while a pass pads only
/// to the longest of eight similar lengths (measured on 2 cores, texts of 4–25 words in
/// batches of 32: 269 texts/s against 205 with passes of 32, 262 with 4 or 16).
const PASS_SIZE: usize = 8;

/// Why a model could not be loaded or run.
#[derive(Debug, thiserror::Error)]
pub enum EncoderError {
    /// A model file is absent.
    #[error("{} is missing", path.display())]
    Missing {
        /// The file looked for.
        path: PathBuf,
    },
    /// A model file could not be read or makes no sense.
    #[error("{} is unreadable or corrupt: {message}", path.display())]
    Corrupt {
        /// The file at fault.
        path: PathBuf,
        /// What was wrong with it.
        message: String,
    },
    /// Tokenising or running the model failed.
    #[error("encoding failed: {0}")]
    Inference(String),
    /// The encoder's worker threads could not be started.
    #[error("cannot start the encoder's threads: {0}")]
    Threads(String),
}

/// How urgently a call's vectors are needed, which picks the thread pool that runs it.
/// Interactive calls run on one thread: a query is a few dozen tokens, and splitting its
/// small matrix products across cores cost more in waiting for a busy core than it saved
/// (measured on 2 cores with background embedding running: p99 38 ms on two threads, 20 ms
/// on one). Background calls use every core at a lower OS priority, so embedding stored
/// texts takes only the CPU that queries and the host leave idle.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Urgency {
    /// Someone waits for the vector (a recall query).
    Interactive,
    /// Vectors for stored texts, made while nothing waits for them.
    Background,
}

/// How much lower than normal the background pool's threads run where the idle scheduling
/// class is refused (`nice` 10: about a tenth of a core's share against a busy
/// normal-priority thread).
const BACKGROUND_NICENESS: i32 = 10;

/// A loaded encoder; cheap to share (`&self` everywhere, no interior state).
pub struct SentenceEncoder {
    model: bert::Bert,
    tokenizer: Tokenizer,
    device: Device,
    dims: usize,
    interactive: rayon::ThreadPool,
    background: rayon::ThreadPool,
}

impl SentenceEncoder {
    /// Load the model in `dir`. Inputs longer than `max_tokens` are truncated (256 for
    /// all-MiniLM-L6-v2, as sentence-transformers does).
    pub fn load(dir: &Path, max_tokens: usize) -> Result<Self, EncoderError> {
        for name in MODEL_FILES {
            let path = dir.join(name);
            if !path.is_file() {
                return Err(EncoderError::Missing { path });
            }
        }
        let config_path = dir.join("config.json");
        let config: BertConfig = read(&config_path)
            .and_then(|bytes| serde_json::from_slice(&bytes).map_err(|e| e.to_string()))
            .map_err(|message| corrupt(&config_path, message))?;
        let weights_path = dir.join("model.safetensors");
        let weights = read(&weights_path).map_err(|message| corrupt(&weights_path, message))?;
        let device = Device::Cpu;
        let model = VarBuilder::from_buffered_safetensors(weights, DType::F32, &device)
            .and_then(|vb| bert::Bert::load(&config, vb))
            .map_err(|e| corrupt(&weights_path, e.to_string()))?;
        let tokenizer_path = dir.join("tokenizer.json");
        let mut tokenizer = Tokenizer::from_file(&tokenizer_path)
            .map_err(|e| corrupt(&tokenizer_path, e.to_string()))?;
        let max_tokens = max_tokens.clamp(8, config.max_position_embeddings);
        tokenizer
            .with_truncation(Some(TruncationParams {
                max_length: max_tokens,
                ..TruncationParams::default()
            }))
            .map_err(|e| corrupt(&tokenizer_path, e.to_string()))?;
        // The shipped tokenizer pads every input to a fixed length; pad each pass only to
        // its longest text (the mask keeps padding out of attention and the mean).
        tokenizer.with_padding(Some(PaddingParams {
            strategy: PaddingStrategy::BatchLongest,
            ..PaddingParams::default()
        }));
        Ok(Self {
            model,
            tokenizer,
            device,
            dims: config.hidden_size,
            interactive: thread_pool("cairn-encode", Some(1), None)?,
            background: thread_pool("cairn-embed-bg", None, Some(BACKGROUND_NICENESS))?,
        })
    }

    /// Dimensions of every vector.
    pub fn dims(&self) -> usize {
        self.dims
    }

    /// One unit-length vector per text, in order.
    pub fn encode(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, EncoderError> {
        self.encode_with(texts, Urgency::Interactive)
    }

    /// [`encode`](Self::encode) in the pool `urgency` picks: the matrix products and the
    /// tokeniser split their work across that pool's threads only.
    pub fn encode_with(
        &self,
        texts: &[String],
        urgency: Urgency,
    ) -> Result<Vec<Vec<f32>>, EncoderError> {
        let pool = match urgency {
            Urgency::Interactive => &self.interactive,
            Urgency::Background => &self.background,
        };
        pool.install(|| self.encode_in_pool(texts))
    }

    fn encode_in_pool(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, EncoderError> {
        let mut order: Vec<usize> = (0..texts.len()).collect();
        order.sort_by_key(|&i| texts[i].len());
        // Passes run side by side, one per thread of the pool (a query's pool has one): the
        // matrix products use a second thread only when it is free, and the rest of a pass —
        // attention, norms — runs on one, so two passes at once keep both cores busy
        // (background embedding 139 → 181 texts/s, medians of four interleaved bench runs on
        // 2 cores; the vectors are the same).
        let passes: Vec<Vec<Vec<f32>>> = order
            .par_chunks(PASS_SIZE)
            .map(|pass| self.encode_pass(pass.iter().map(|&i| texts[i].as_str()).collect()))
            .collect::<Result<_, _>>()?;
        let mut vectors = vec![Vec::new(); texts.len()];
        for (pass, encoded) in order.chunks(PASS_SIZE).zip(passes) {
            for (&i, vector) in pass.iter().zip(encoded) {
                vectors[i] = vector;
            }
        }
        Ok(vectors)
    }

    fn encode_pass(&self, texts: Vec<&str>) -> Result<Vec<Vec<f32>>, EncoderError> {
        let encodings = self
            .tokenizer
            .encode_batch(texts, true)
            .map_err(|e| EncoderError::Inference(e.to_string()))?;
        let rows = encodings.len();
        let tokens = encodings.first().map_or(0, |e| e.get_ids().len());
        let ids: Vec<u32> = encodings
            .iter()
            .flat_map(|e| e.get_ids().to_vec())
            .collect();
        let mask: Vec<f32> = encodings
            .iter()
            .flat_map(|e| e.get_attention_mask().iter().map(|&m| m as f32))
            .collect();
        let run = || -> candle_core::Result<Vec<Vec<f32>>> {
            let ids = Tensor::from_vec(ids, (rows, tokens), &self.device)?;
            let mask = Tensor::from_vec(mask, (rows, tokens), &self.device)?;
            let hidden = self.model.forward(&ids, &mask)?;
            bert::mean_pool_normalised(&hidden, &mask)?.to_vec2()
        };
        let vectors = run().map_err(|e| EncoderError::Inference(e.to_string()))?;
        if vectors.iter().flatten().any(|x| !x.is_finite()) {
            // Damaged weights (a bit flipped on disk, a file overwritten in place) make NaNs
            // that would be stored as vectors matching nothing.
            return Err(EncoderError::Inference(
                "the model gave a vector that is not a number: its weights are damaged".into(),
            ));
        }
        Ok(vectors)
    }
}

/// Settle candle's process-wide thread use, for a process that encodes while it does other
/// work (the host). Unless the operator set them, `CANDLE_NUM_THREADS=1` makes element-wise
/// operations run on the calling thread — inside the pool [`Urgency`] picked — instead of
/// in one process-wide spinning pool that queries and background embedding would share
/// behind a lock; `RAYON_NUM_THREADS` set to the core count spares candle reading the CPU
/// list from `/proc` on every matrix product. Measured on 2 cores: a query's p50 12.8 ms
/// instead of 15.4 ms, background embedding 213 texts/s instead of 230.
///
/// # Safety
/// Sets environment variables: call it before the process starts any other thread.
pub unsafe fn settle_process_threads() {
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    for (name, value) in [
        ("CANDLE_NUM_THREADS", "1".to_string()),
        ("RAYON_NUM_THREADS", cores.to_string()),
    ] {
        if std::env::var_os(name).is_none() {
            // SAFETY: the caller guarantees no other thread exists yet.
            unsafe { std::env::set_var(name, value) };
        }
    }
}

/// A pool of `threads` threads (one per core when None) named `name`; `niceness` lowers
/// their priority.
fn thread_pool(
    name: &'static str,
    threads: Option<usize>,
    niceness: Option<i32>,
) -> Result<rayon::ThreadPool, EncoderError> {
    rayon::ThreadPoolBuilder::new()
        .num_threads(threads.unwrap_or(0))
        .thread_name(move |i| format!("{name}-{i}"))
        .start_handler(move |_| {
            if let Some(niceness) = niceness {
                lower_this_threads_priority(niceness);
            }
        })
        .build()
        .map_err(|e| EncoderError::Threads(e.to_string()))
}

/// Put the calling thread in the idle scheduling class (`SCHED_IDLE`: it runs on what
/// normal threads leave, and a waking turn preempts it at once), or, where that is
/// refused, lower its priority by `niceness`. Linux schedules threads one by one, so the
/// rest of the process keeps its priority. Best effort: where both fail or the OS differs,
/// the thread runs at normal priority.
#[cfg(target_os = "linux")]
fn lower_this_threads_priority(niceness: i32) {
    let idle = libc::sched_param { sched_priority: 0 };
    // SAFETY: sched_setscheduler reads the parameter block we pass; pid 0 is the calling
    // thread.
    if unsafe { libc::sched_setscheduler(0, libc::SCHED_IDLE, &idle) } == 0 {
        return;
    }
    // SAFETY: setpriority only reads its integer arguments; `who` 0 is the calling thread.
    let failed = unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, niceness) } != 0;
    if failed {
        eprintln!(
            "cairn-encoder: cannot lower a background thread's priority: {}",
            std::io::Error::last_os_error()
        );
    }
}

#[cfg(not(target_os = "linux"))]
fn lower_this_threads_priority(_niceness: i32) {}

fn read(path: &Path) -> Result<Vec<u8>, String> {
    std::fs::read(path).map_err(|e| e.to_string())
}

fn corrupt(path: &Path, message: impl Into<String>) -> EncoderError {
    EncoderError::Corrupt {
        path: path.to_path_buf(),
        message: message.into(),
    }
}
