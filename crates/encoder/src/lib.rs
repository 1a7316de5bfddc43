//! A sentence encoder on the CPU: a BERT model such as all-MiniLM-L6-v2 read from a local
//! directory (`config.json`, `model.safetensors`, `tokenizer.json`), run with candle, the
//! hidden states mean-pooled over the real tokens and L2-normalised — what
//! sentence-transformers computes, so the vectors match the published ones.
//!
//! Nothing is downloaded: the files are installed beforehand (`cargo xtask install-model`)
//! and a missing or corrupt file is an [`EncoderError`] naming it.

mod bert;

use std::path::{Path, PathBuf};

use candle_core::{DType, Device, Tensor};
use candle_nn::VarBuilder;
use tokenizers::{PaddingParams, PaddingStrategy, Tokenizer, TruncationParams};

pub use bert::BertConfig;

/// The files a model directory holds.
pub const MODEL_FILES: [&str; 3] = ["config.json", "model.safetensors", "tokenizer.json"];

/// Texts encoded in one forward pass: sorted by length first, so that each pass pads little.
const PASS_SIZE: usize = 32;

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
}

/// A loaded encoder; cheap to share (`&self` everywhere, no interior state).
pub struct SentenceEncoder {
    model: bert::Bert,
    tokenizer: Tokenizer,
    device: Device,
    dims: usize,
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
        })
    }

    /// Dimensions of every vector.
    pub fn dims(&self) -> usize {
        self.dims
    }

    /// One unit-length vector per text, in order.
    pub fn encode(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, EncoderError> {
        let mut order: Vec<usize> = (0..texts.len()).collect();
        order.sort_by_key(|&i| texts[i].len());
        let mut vectors = vec![Vec::new(); texts.len()];
        for pass in order.chunks(PASS_SIZE) {
            let batch: Vec<&str> = pass.iter().map(|&i| texts[i].as_str()).collect();
            for (&i, vector) in pass.iter().zip(self.encode_pass(batch)?) {
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
        run().map_err(|e| EncoderError::Inference(e.to_string()))
    }
}

fn read(path: &Path) -> Result<Vec<u8>, String> {
    std::fs::read(path).map_err(|e| e.to_string())
}

fn corrupt(path: &Path, message: impl Into<String>) -> EncoderError {
    EncoderError::Corrupt {
        path: path.to_path_buf(),
        message: message.into(),
    }
}
