//! A BERT encoder (embeddings, self-attention layers, feed-forward) written out on candle's
//! tensor operations: the part of `transformers`' `BertModel` a sentence encoder needs (no
//! pooler, no dropout, token type 0 throughout).

use candle_core::{CpuStorage, D, DType, InplaceOp1, Layout, Module, Tensor};
use candle_nn::{Embedding, LayerNorm, VarBuilder};
use rayon::prelude::*;
use rten_simd::SimdUnaryOp;
use serde::Deserialize;

use crate::linear::Linear;

/// The fields of a Hugging Face `config.json` the encoder reads.
#[derive(Debug, Clone, Deserialize)]
pub struct BertConfig {
    /// Tokens in the vocabulary.
    pub vocab_size: usize,
    /// Width of every hidden state (384 for MiniLM-L6).
    pub hidden_size: usize,
    /// Transformer layers.
    pub num_hidden_layers: usize,
    /// Attention heads per layer.
    pub num_attention_heads: usize,
    /// Width of the feed-forward layer.
    pub intermediate_size: usize,
    /// Longest input the position embeddings cover.
    pub max_position_embeddings: usize,
    /// Token types (segments) the embeddings know.
    pub type_vocab_size: usize,
    /// Epsilon of every layer norm.
    pub layer_norm_eps: f64,
    /// The feed-forward activation; only `gelu` (exact, erf) is supported.
    pub hidden_act: String,
}

struct Embeddings {
    words: Embedding,
    positions: Embedding,
    token_types: Embedding,
    norm: LayerNorm,
}

impl Embeddings {
    fn load(config: &BertConfig, vb: VarBuilder) -> candle_core::Result<Self> {
        let width = config.hidden_size;
        Ok(Self {
            words: candle_nn::embedding(config.vocab_size, width, vb.pp("word_embeddings"))?,
            positions: candle_nn::embedding(
                config.max_position_embeddings,
                width,
                vb.pp("position_embeddings"),
            )?,
            token_types: candle_nn::embedding(
                config.type_vocab_size,
                width,
                vb.pp("token_type_embeddings"),
            )?,
            norm: candle_nn::layer_norm(width, config.layer_norm_eps, vb.pp("LayerNorm"))?,
        })
    }

    /// `[batch, tokens]` ids → `[batch, tokens, hidden]`.
    fn forward(&self, ids: &Tensor) -> candle_core::Result<Tensor> {
        let (_, tokens) = ids.dims2()?;
        let positions = Tensor::arange(0u32, tokens as u32, ids.device())?.unsqueeze(0)?;
        let types = positions.zeros_like()?;
        let summed = self
            .words
            .forward(ids)?
            .broadcast_add(&self.positions.forward(&positions)?)?
            .broadcast_add(&self.token_types.forward(&types)?)?;
        self.norm.forward(&summed)
    }
}

struct Layer {
    /// The query, key and value projections as one product (`[.., 3 × hidden]`).
    query_key_value: Linear,
    attention_out: Linear,
    attention_norm: LayerNorm,
    intermediate: Linear,
    output: Linear,
    output_norm: LayerNorm,
    heads: usize,
}

impl Layer {
    fn load(config: &BertConfig, vb: VarBuilder) -> candle_core::Result<Self> {
        let (width, inner, eps) = (
            config.hidden_size,
            config.intermediate_size,
            config.layer_norm_eps,
        );
        let attention = vb.pp("attention");
        Ok(Self {
            query_key_value: Linear::stacked(
                width,
                width,
                &["query", "key", "value"].map(|name| attention.pp("self").pp(name)),
            )?,
            attention_out: Linear::load(width, width, attention.pp("output.dense"))?,
            attention_norm: candle_nn::layer_norm(width, eps, attention.pp("output.LayerNorm"))?,
            intermediate: Linear::load(width, inner, vb.pp("intermediate.dense"))?,
            output: Linear::load(inner, width, vb.pp("output.dense"))?,
            output_norm: candle_nn::layer_norm(width, eps, vb.pp("output.LayerNorm"))?,
            heads: config.num_attention_heads,
        })
    }

    /// One layer over the pass's real tokens (`[real, hidden]`, see [`RealTokens`]);
    /// `mask_bias` is `[batch, 1, 1, tokens]`, 0 for real tokens and a large negative number
    /// for padding.
    fn forward(
        &self,
        x: &Tensor,
        layout: &RealTokens,
        mask_bias: &Tensor,
    ) -> candle_core::Result<Tensor> {
        let (batch, tokens, width) = (layout.batch, layout.tokens, x.dim(1)?);
        let head_width = width / self.heads;
        let split = |t: Tensor| -> candle_core::Result<Tensor> {
            t.reshape((batch, tokens, self.heads, head_width))?
                .transpose(1, 2)?
                .contiguous()
        };
        let projected = layout.padded(&self.query_key_value.forward(x)?)?;
        let query = split(projected.narrow(2, 0, width)?)?;
        let key = split(projected.narrow(2, width, width)?)?;
        let value = split(projected.narrow(2, 2 * width, width)?)?;
        let scale = 1.0 / (head_width as f64).sqrt();
        let scores = (query.matmul(&key.t()?)? * scale)?.broadcast_add(mask_bias)?;
        let weights = candle_nn::ops::softmax_last_dim(&scores)?;
        let context = weights
            .matmul(&value)?
            .transpose(1, 2)?
            .reshape((batch, tokens, width))?;
        let context = layout.real(&context)?;
        let attended = self
            .attention_norm
            .forward(&(self.attention_out.forward(&context)? + x)?)?;
        let inner = self.intermediate.forward(&attended)?.contiguous()?;
        inner.inplace_op1(&Gelu)?;
        self.output_norm
            .forward(&(self.output.forward(&inner)? + attended)?)
    }
}

/// The exact (erf) GELU, in place, on `rten-vecmath`'s SIMD kernel across the thread pool
/// the encoder runs in. candle's `gelu_erf` evaluates `erf` one element at a time (the `libm`
/// crate's), which took 12% of the encoder's time; this one agrees with it to within 1e-6
/// (`the_simd_gelu_agrees_with_candles`).
struct Gelu;

/// Elements per task of [`Gelu`]: enough that a task's hand-over is small beside its work.
const GELU_CHUNK: usize = 16 * 1024;

impl InplaceOp1 for Gelu {
    fn name(&self) -> &'static str {
        "gelu-erf-simd"
    }

    fn cpu_fwd(&self, storage: &mut CpuStorage, layout: &Layout) -> candle_core::Result<()> {
        let CpuStorage::F32(values) = storage else {
            candle_core::bail!("{} takes f32 tensors", self.name())
        };
        let Some((start, end)) = layout.contiguous_offsets() else {
            candle_core::bail!("{} takes contiguous tensors", self.name())
        };
        values[start..end]
            .par_chunks_mut(GELU_CHUNK)
            .for_each(|chunk| rten_vecmath::Gelu {}.map_mut(chunk));
        Ok(())
    }
}

/// The encoder: embeddings and layers, weights named as in `BertModel` checkpoints
/// (with or without a `bert.` prefix).
pub struct Bert {
    embeddings: Embeddings,
    layers: Vec<Layer>,
}

impl Bert {
    /// The model `config` describes, with its weights from `vb`.
    pub fn load(config: &BertConfig, vb: VarBuilder) -> candle_core::Result<Self> {
        if config.hidden_act != "gelu" {
            candle_core::bail!(
                "hidden_act `{}` is not supported (only `gelu`)",
                config.hidden_act
            );
        }
        if config.num_attention_heads == 0
            || !config
                .hidden_size
                .is_multiple_of(config.num_attention_heads)
        {
            candle_core::bail!(
                "hidden_size {} is not a multiple of num_attention_heads {}",
                config.hidden_size,
                config.num_attention_heads
            );
        }
        let vb = if vb.contains_tensor("bert.embeddings.word_embeddings.weight") {
            vb.pp("bert")
        } else {
            vb
        };
        let embeddings = Embeddings::load(config, vb.pp("embeddings"))?;
        let layers = (0..config.num_hidden_layers)
            .map(|i| Layer::load(config, vb.pp(format!("encoder.layer.{i}"))))
            .collect::<candle_core::Result<_>>()?;
        Ok(Self { embeddings, layers })
    }

    /// Hidden states `[batch, tokens, hidden]` of `ids` `[batch, tokens]` (u32), attending
    /// only to the tokens `mask` (`[batch, tokens]`, 1 or 0, f32) marks as real.
    pub fn forward(&self, ids: &Tensor, mask: &Tensor) -> candle_core::Result<Tensor> {
        let (batch, tokens) = mask.dims2()?;
        let mask_bias = ((mask.ones_like()? - mask)? * -10_000.0)?
            .to_dtype(DType::F32)?
            .reshape((batch, 1, 1, tokens))?;
        let layout = RealTokens::of(mask)?;
        let mut hidden = layout.real(&self.embeddings.forward(ids)?)?;
        for layer in &self.layers {
            hidden = layer.forward(&hidden, &layout, &mask_bias)?;
        }
        layout.padded(&hidden)
    }
}

/// Where a pass's real tokens sit among its padded positions. Everything but attention works
/// token by token (the dense layers, the norms, the GELU: nearly all of the work), so it runs
/// on the real tokens only, `[real, width]`; attention takes them padded to
/// `[batch, tokens, width]`. A pass of eight texts pads them to its longest, which for the
/// background embedder's batches of 32 of the bench's texts is about a tenth of the tokens.
struct RealTokens {
    batch: usize,
    tokens: usize,
    /// How to move between the two layouts; `None` when no token is padding.
    padding: Option<Padding>,
}

/// The index vectors that move rows between the padded and the real layout.
struct Padding {
    /// Each real token's padded position (`text × tokens + token`), in order.
    positions: Tensor,
    /// Each padded position's row among the real tokens, or the row after the last (zeros)
    /// for padding.
    rows: Tensor,
}

impl RealTokens {
    /// The layout `mask` (`[batch, tokens]`, 1 or 0, f32) describes.
    fn of(mask: &Tensor) -> candle_core::Result<Self> {
        let (batch, tokens) = mask.dims2()?;
        let marks = mask.flatten_all()?.to_vec1::<f32>()?;
        let positions: Vec<u32> = (0u32..)
            .zip(&marks)
            .filter(|(_, mark)| **mark > 0.0)
            .map(|(position, _)| position)
            .collect();
        let (real, all) = (positions.len(), marks.len());
        let padding = if real < all {
            let mut rows = vec![real as u32; all];
            for (row, &position) in (0u32..).zip(&positions) {
                rows[position as usize] = row;
            }
            Some(Padding {
                positions: Tensor::from_vec(positions, real, mask.device())?,
                rows: Tensor::from_vec(rows, all, mask.device())?,
            })
        } else {
            None
        };
        Ok(Self {
            batch,
            tokens,
            padding,
        })
    }

    /// `[batch, tokens, width]` → the real tokens' rows, `[real, width]`.
    fn real(&self, padded: &Tensor) -> candle_core::Result<Tensor> {
        let width = padded.dim(2)?;
        let flat = padded.reshape((self.batch * self.tokens, width))?;
        match &self.padding {
            Some(padding) => flat.index_select(&padding.positions, 0),
            None => Ok(flat),
        }
    }

    /// `[real, width]` → `[batch, tokens, width]`, padding as zeros.
    fn padded(&self, real: &Tensor) -> candle_core::Result<Tensor> {
        let width = real.dim(1)?;
        let rows = match &self.padding {
            Some(padding) => {
                let zeros = Tensor::zeros((1, width), real.dtype(), real.device())?;
                Tensor::cat(&[real, &zeros], 0)?.index_select(&padding.rows, 0)?
            }
            None => real.clone(),
        };
        rows.reshape((self.batch, self.tokens, width))
    }
}

/// Mean of the hidden states over the real tokens (`mask` `[batch, tokens]`, f32),
/// L2-normalised: `[batch, hidden]`.
pub fn mean_pool_normalised(hidden: &Tensor, mask: &Tensor) -> candle_core::Result<Tensor> {
    let weights = mask.unsqueeze(2)?;
    let summed = hidden.broadcast_mul(&weights)?.sum(1)?;
    let counts = mask.sum_keepdim(1)?.clamp(1e-9, f64::MAX)?;
    let mean = summed.broadcast_div(&counts)?;
    let norms = mean
        .sqr()?
        .sum_keepdim(D::Minus1)?
        .sqrt()?
        .clamp(1e-12, f64::MAX)?;
    mean.broadcast_div(&norms)
}

#[cfg(test)]
mod tests {
    use candle_core::Device;

    use super::*;

    #[test]
    fn the_simd_gelu_agrees_with_candles() {
        // -8 to 8 in steps of 1/1024, and a length that is no multiple of a SIMD width.
        let xs: Vec<f32> = (-8192..=8192).map(|i| i as f32 / 1024.0).collect();
        let input = Tensor::new(xs.as_slice(), &Device::Cpu).expect("tensor");
        let expected: Vec<f32> = input.gelu_erf().expect("gelu").to_vec1().expect("values");
        input.inplace_op1(&Gelu).expect("simd gelu");
        let got: Vec<f32> = input.to_vec1().expect("values");
        let worst = got
            .iter()
            .zip(&expected)
            .map(|(a, b)| (a - b).abs())
            .fold(0.0f32, f32::max);
        assert!(worst < 1e-6, "largest difference {worst}");
    }
}
