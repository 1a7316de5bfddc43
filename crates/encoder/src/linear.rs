//! The encoder's dense layers on `rten-gemm`, their weights packed once at load.
//!
//! candle's matrix product packs its right-hand matrix on every call. For a query of a dozen
//! tokens that packing is most of the work: a 12 × 384 by 384 × 1536 product ran at 37
//! GFLOP/s on one AVX2 core through candle and at 83 with the weight packed beforehand (at
//! 128 rows, a pass of eight texts, 74 → 83). The layer is a candle custom op, so the rest of
//! the model stays on candle's tensors.

use candle_core::{CpuStorage, CustomOp1, Layout, Shape, Tensor};
use candle_nn::VarBuilder;
use rten_gemm::{BiasVector, GemmExecutor, GemmInputA, GemmInputB, GemmOptions, PackedBMatrix};
use rten_tensor::NdTensorView;

/// `y = x Wᵀ + b` over the last dimension of `x`, `W` as stored in BERT checkpoints
/// (`[outputs, inputs]`), packed for the CPU's matrix kernel.
pub struct Linear {
    weight: PackedBMatrix<f32>,
    bias: Vec<f32>,
    inputs: usize,
    outputs: usize,
}

impl Linear {
    /// The layer whose `weight` and `bias` are under `vb`.
    pub fn load(inputs: usize, outputs: usize, vb: VarBuilder) -> candle_core::Result<Self> {
        Self::stacked(inputs, outputs, &[vb])
    }

    /// One layer computing the outputs of every layer under `parts` side by side (their
    /// outputs concatenated in order), so that several products of the same input are one.
    pub fn stacked(
        inputs: usize,
        outputs_each: usize,
        parts: &[VarBuilder],
    ) -> candle_core::Result<Self> {
        let mut weight = Vec::with_capacity(parts.len() * outputs_each * inputs);
        let mut bias = Vec::with_capacity(parts.len() * outputs_each);
        for vb in parts {
            let part = vb.get((outputs_each, inputs), "weight")?;
            weight.extend(part.flatten_all()?.to_vec1::<f32>()?);
            bias.extend(vb.get(outputs_each, "bias")?.to_vec1::<f32>()?);
        }
        let outputs = parts.len() * outputs_each;
        let stored = NdTensorView::from_data([outputs, inputs], weight.as_slice());
        let weight = GemmExecutor::<f32>::default().prepack_b(stored.transposed());
        Ok(Self {
            weight,
            bias,
            inputs,
            outputs,
        })
    }

    /// The layer applied to `x` (`[..., inputs]`): `[..., outputs]`.
    pub fn forward(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        x.contiguous()?.apply_op1_no_bwd(self)
    }
}

impl CustomOp1 for Linear {
    fn name(&self) -> &'static str {
        "linear-rten-gemm"
    }

    fn cpu_fwd(
        &self,
        storage: &CpuStorage,
        layout: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let CpuStorage::F32(values) = storage else {
            candle_core::bail!("{} takes f32 tensors", self.name())
        };
        let Some((start, end)) = layout.contiguous_offsets() else {
            candle_core::bail!("{} takes contiguous tensors", self.name())
        };
        let mut dims = layout.shape().dims().to_vec();
        if dims.last() != Some(&self.inputs) {
            candle_core::bail!("{} takes [.., {}], got {dims:?}", self.name(), self.inputs)
        }
        let rows = (end - start) / self.inputs;
        let input = NdTensorView::from_data([rows, self.inputs], &values[start..end]);
        let mut output = vec![0.0f32; rows * self.outputs];
        // An executor is a boxed choice of kernel (not `Send`), made the same way as the one
        // that packed the weight; the product checks that the two kernels agree.
        GemmExecutor::<f32>::default()
            .gemm(
                &mut output,
                GemmInputA::Unpacked(input),
                GemmInputB::Packed(&self.weight),
                GemmOptions {
                    bias: Some(BiasVector::Row(&self.bias)),
                    ..GemmOptions::default()
                },
            )
            .map_err(|e| candle_core::Error::Msg(format!("{}: {e}", self.name())))?;
        if let Some(last) = dims.last_mut() {
            *last = self.outputs;
        }
        Ok((CpuStorage::F32(output), Shape::from(dims)))
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use candle_core::{DType, Device};

    use super::*;

    fn values(count: usize, seed: usize) -> Vec<f32> {
        (0..count)
            .map(|i| ((i * 37 + seed * 11) % 23) as f32 / 23.0 - 0.5)
            .collect()
    }

    #[test]
    fn stacked_layers_compute_what_each_layer_computes() {
        let (inputs, outputs) = (7, 3);
        let device = Device::Cpu;
        let mut tensors = HashMap::new();
        for (seed, part) in ["a", "b"].iter().enumerate() {
            let weight =
                Tensor::from_vec(values(outputs * inputs, seed), (outputs, inputs), &device);
            let bias = Tensor::from_vec(values(outputs, seed + 5), outputs, &device);
            tensors.insert(format!("{part}.weight"), weight.expect("weight"));
            tensors.insert(format!("{part}.bias"), bias.expect("bias"));
        }
        let vb = VarBuilder::from_tensors(tensors.clone(), DType::F32, &device);
        let layer = Linear::stacked(inputs, outputs, &[vb.pp("a"), vb.pp("b")]).expect("layer");
        let x = Tensor::from_vec(values(2 * 5 * inputs, 9), (2, 5, inputs), &device).expect("x");
        let got = layer.forward(&x).expect("forward");
        assert_eq!(got.dims(), &[2, 5, 2 * outputs]);
        let expected: Vec<Tensor> = ["a", "b"]
            .iter()
            .map(|part| {
                let weight = &tensors[&format!("{part}.weight")];
                x.broadcast_matmul(&weight.t()?)?
                    .broadcast_add(&tensors[&format!("{part}.bias")])
            })
            .collect::<candle_core::Result<_>>()
            .expect("candle's products");
        let expected = Tensor::cat(&expected, 2).expect("concatenated");
        let worst = (got - expected)
            .and_then(|d| d.abs()?.flatten_all()?.max(0)?.to_scalar::<f32>())
            .expect("difference");
        assert!(worst < 1e-5, "largest difference {worst}");
    }
}
