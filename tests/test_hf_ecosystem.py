"""The Hugging Face libraries around transformers, on neuron, as their users run them.

Accelerate (``Accelerator()`` picks neuron; ``accelerate launch`` on one process),
PEFT (LoRA fine-tune and merge), TRL (``SFTTrainer``), Diffusers (UNet2DModel and
DiTTransformer2DModel denoising steps) and sentence-transformers (``encode``). Every
model and tokenizer is tiny and built in code; nothing is downloaded.
"""

import copy
import os
import sys
import textwrap
from pathlib import Path

# Before any Hugging Face import: nothing may be downloaded.
os.environ["HF_HUB_OFFLINE"] = "1"

import pytest
import torch
import torch.nn.functional as F
from bounded_job import clean_env, run_bounded
from datasets import Dataset
from hf_tiny import bert_dir, llama_tokenizer, tiny_llama
from transformers import LlamaForCausalLM


@pytest.fixture
def fresh_accelerate_state():
    """Accelerate keeps one process-wide state; give each test its own."""
    from accelerate.state import AcceleratorState

    AcceleratorState._reset_state(reset_partial_state=True)
    yield
    AcceleratorState._reset_state(reset_partial_state=True)


# -------------------------------------------------------------------------- Accelerate


def _accelerate_loop(accelerator, outputs=1):
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(8, 32), torch.nn.Tanh(), torch.nn.Linear(32, outputs)
    )
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    g = torch.Generator().manual_seed(1)
    x = torch.randn(32, 8, generator=g)
    data = torch.utils.data.TensorDataset(x, x[:, :outputs].sin())
    loader = torch.utils.data.DataLoader(data, batch_size=8)
    model, opt, loader = accelerator.prepare(model, opt, loader)
    losses, devices = [], set()
    for _ in range(3):
        for xb, yb in loader:
            devices.add(xb.device)
            with accelerator.accumulate(model):
                loss = F.mse_loss(model(xb), yb)
                accelerator.backward(loss)
                opt.step()
                opt.zero_grad()
            losses.append(loss.item())
    return model, losses, devices


def test_accelerator_picks_neuron_and_trains_like_cpu(fresh_accelerate_state):
    from accelerate import Accelerator
    from accelerate.state import AcceleratorState

    acc = Accelerator(gradient_accumulation_steps=2)
    assert acc.device.type == "neuron"
    assert acc.num_processes == 1
    model, losses, devices = _accelerate_loop(acc)
    assert devices == {torch.device("neuron:0")}
    assert all(p.device.type == "neuron" for p in model.parameters())
    assert losses[-1] < losses[0]

    AcceleratorState._reset_state(reset_partial_state=True)
    cpu_acc = Accelerator(cpu=True, gradient_accumulation_steps=2)
    assert cpu_acc.device == torch.device("cpu")
    _, cpu_losses, _ = _accelerate_loop(cpu_acc)
    torch.testing.assert_close(losses, cpu_losses, rtol=1e-5, atol=1e-6)


def test_accelerate_loop_prints_no_device_warnings(fresh_accelerate_state, capfd):
    # The CPU run of the same loop warns about nothing: neither may the device.
    # Device-work warnings print once per message (which names the shapes), so this
    # loop uses shapes of its own.
    from accelerate import Accelerator

    _accelerate_loop(Accelerator(), outputs=3)
    torch.neuron.synchronize()
    err = capfd.readouterr().err
    assert "warning from device work" not in err, err


def test_accelerator_bf16_autocasts_on_neuron(fresh_accelerate_state):
    from accelerate import Accelerator

    acc = Accelerator(mixed_precision="bf16")
    assert acc.native_amp
    model = acc.prepare(torch.nn.Linear(8, 4))
    x = torch.randn(2, 8, device=acc.device)
    with acc.autocast():
        inner = x @ x.T
    assert inner.dtype == torch.bfloat16
    out = model(x)  # prepare() wraps forward in autocast and returns fp32
    assert out.device.type == "neuron" and out.dtype == torch.float32


LAUNCHED = """
import torch
from accelerate import Accelerator

acc = Accelerator()
torch.manual_seed(0)
model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
model, opt = acc.prepare(model, opt)
x = torch.randn(8, 4, device=acc.device)
for _ in range(3):
    with acc.autocast():
        loss = model(x).square().mean()
    acc.backward(loss)
    opt.step()
    opt.zero_grad()
with acc.autocast():
    dtype = (x @ x.T).dtype
param = next(model.parameters()).device
print("RESULT", acc.device.type, acc.num_processes, acc.mixed_precision, param, dtype, loss.item())
"""


def test_accelerate_launch_one_process(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent(LAUNCHED))
    launcher = Path(sys.executable).with_name("accelerate")
    cmd = [str(launcher)] if launcher.exists() else [sys.executable, "-m", "accelerate"]
    cmd += ["launch", "--num_processes", "1", "--mixed_precision", "bf16", str(script)]
    # No user config: a home of its own, offline.
    env = clean_env("ACCELERATE_", HF_HOME=str(tmp_path / "hf_home"), HF_HUB_OFFLINE="1")
    out, _ = run_bounded(cmd, env=env, timeout=180, cwd=tmp_path, what="accelerate launch")
    line = next(s for s in out.splitlines() if s.startswith("RESULT"))
    _, device, nproc, precision, param, dtype, _ = line.split()
    assert (device, nproc, precision) == ("neuron", "1", "bf16")
    assert param == "neuron:0"
    assert dtype == "torch.bfloat16"


# -------------------------------------------------------------------------------- PEFT


def test_peft_lora_finetune_and_merge_matches_cpu():
    from peft import LoraConfig, get_peft_model

    ids = torch.randint(3, 128, (4, 12), generator=torch.Generator().manual_seed(0))
    results = {}
    for dev in ("cpu", "neuron"):
        lora = LoraConfig(
            r=4,
            lora_alpha=8,
            target_modules=["q_proj", "v_proj", "up_proj"],
            lora_dropout=0.0,
            init_lora_weights="gaussian",  # B != 0, so the adapter changes the output
        )
        torch.manual_seed(0)
        model = get_peft_model(tiny_llama().train(), lora).to(dev)
        x = ids.to(dev)
        opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2)
        losses = []
        for _ in range(4):
            loss = model(input_ids=x, labels=x).loss
            loss.backward()
            opt.step()
            opt.zero_grad()
            losses.append(loss.item())
        model.eval()
        with torch.no_grad():
            unmerged = model(input_ids=x).logits
            merged_model = model.merge_and_unload()
            merged = merged_model(input_ids=x).logits
        assert type(merged_model) is LlamaForCausalLM
        assert not any("lora" in n for n, _ in merged_model.named_parameters())
        assert all(p.device.type == dev for p in merged_model.parameters())
        torch.testing.assert_close(merged, unmerged, rtol=1e-4, atol=1e-5)
        results[dev] = (losses, merged.cpu())
    assert results["neuron"][0][-1] < results["neuron"][0][0]
    torch.testing.assert_close(results["neuron"][0], results["cpu"][0], rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(results["neuron"][1], results["cpu"][1], rtol=1e-4, atol=1e-5)


# --------------------------------------------------------------------------------- TRL


def _sft(tmp_path, use_cpu: bool):
    from trl import SFTConfig, SFTTrainer

    texts = [" ".join(f"w{4 + (s * 5 + j) % 40}" for j in range(12)) for s in range(8)]
    args = SFTConfig(
        output_dir=str(tmp_path / ("cpu" if use_cpu else "neuron")),
        use_cpu=use_cpu,
        bf16=True,
        per_device_train_batch_size=4,
        max_steps=4,
        max_length=32,
        learning_rate=1e-2,
        lr_scheduler_type="constant",
        logging_steps=1,
        save_strategy="no",
        report_to=[],
        disable_tqdm=True,
        seed=0,
    )
    trainer = SFTTrainer(
        model=tiny_llama().train(),
        args=args,
        train_dataset=Dataset.from_dict({"text": texts}),
        processing_class=llama_tokenizer(),
    )
    trainer.train()
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    return args.device, next(trainer.model.parameters()).device, losses


def test_trl_sft_trainer_matches_cpu(tmp_path):
    device, param_device, losses = _sft(tmp_path, use_cpu=False)
    assert device == torch.device("neuron:0") and param_device == device
    assert len(losses) == 4 and losses[-1] < losses[0], losses
    _, cpu_device, cpu_losses = _sft(tmp_path, use_cpu=True)
    assert cpu_device == torch.device("cpu")
    torch.testing.assert_close(torch.tensor(losses), torch.tensor(cpu_losses), rtol=2e-2, atol=0)


# ---------------------------------------------------------------------------- Diffusers


def _unet():
    from diffusers import UNet2DModel

    torch.manual_seed(0)
    return UNet2DModel(
        sample_size=8,
        in_channels=3,
        out_channels=3,
        layers_per_block=1,
        block_out_channels=(32, 64),
        down_block_types=("DownBlock2D", "AttnDownBlock2D"),
        up_block_types=("AttnUpBlock2D", "UpBlock2D"),
        norm_num_groups=8,
        attention_head_dim=8,
    ).eval()


@pytest.mark.parametrize("scheduler", ["DDPMScheduler", "DDIMScheduler", "EulerDiscreteScheduler"])
def test_diffusers_unet_denoising_steps_match_cpu(scheduler):
    import diffusers

    cpu = _unet()
    models = {"cpu": cpu, "neuron": copy.deepcopy(cpu).to("neuron")}
    noise = torch.randn(2, 3, 8, 8, generator=torch.Generator().manual_seed(0))
    out = {}
    for dev, unet in models.items():
        sched = getattr(diffusers, scheduler)(num_train_timesteps=1000)
        sched.set_timesteps(4, device=dev)
        sample = noise.to(dev) * sched.init_noise_sigma
        # A CPU generator, as the diffusers docs recommend for reproducible results.
        gen = torch.Generator().manual_seed(0)
        with torch.no_grad():
            for t in sched.timesteps[:2]:
                eps = unet(sched.scale_model_input(sample, t), t).sample
                sample = sched.step(eps, t, sample, generator=gen).prev_sample
        assert sample.device.type == dev
        out[dev] = sample.cpu()
    torch.testing.assert_close(out["neuron"], out["cpu"], rtol=1e-4, atol=1e-4)


def test_diffusers_ddpm_pipeline_matches_cpu():
    from diffusers import DDPMPipeline, DDPMScheduler

    images = {}
    for dev in ("cpu", "neuron"):
        pipe = DDPMPipeline(unet=_unet(), scheduler=DDPMScheduler(num_train_timesteps=50)).to(dev)
        pipe.set_progress_bar_config(disable=True)
        assert pipe.device.type == dev
        gen = torch.Generator().manual_seed(0)
        images[dev] = pipe(
            batch_size=2, num_inference_steps=3, generator=gen, output_type="np"
        ).images
    assert images["neuron"].shape == (2, 8, 8, 3)
    torch.testing.assert_close(
        torch.from_numpy(images["neuron"]), torch.from_numpy(images["cpu"]), rtol=0, atol=1e-5
    )


def test_diffusers_dit_denoising_step_matches_cpu():
    from diffusers import DDIMScheduler, DiTTransformer2DModel

    torch.manual_seed(0)
    cpu = DiTTransformer2DModel(
        num_attention_heads=2,
        attention_head_dim=16,
        in_channels=4,
        out_channels=4,
        num_layers=2,
        sample_size=8,
        patch_size=2,
        num_embeds_ada_norm=10,
        norm_num_groups=8,
    ).eval()
    models = {"cpu": cpu, "neuron": copy.deepcopy(cpu).to("neuron")}
    latents = torch.randn(2, 4, 8, 8, generator=torch.Generator().manual_seed(1))
    out = {}
    for dev, dit in models.items():
        sched = DDIMScheduler(num_train_timesteps=1000)
        sched.set_timesteps(4, device=dev)
        x = latents.to(dev)
        labels = torch.tensor([1, 3], device=dev)
        with torch.no_grad():
            for t in sched.timesteps[:2]:
                eps = dit(x, timestep=t.expand(2), class_labels=labels).sample
                x = sched.step(eps, t, x).prev_sample
        out[dev] = x.cpu()
    torch.testing.assert_close(out["neuron"], out["cpu"], rtol=1e-4, atol=1e-5)


# ----------------------------------------------------------------- sentence-transformers


def test_sentence_transformers_encode_matches_cpu(tmp_path):
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import (
        Normalize,
        Pooling,
        Transformer,
    )

    body = Transformer(str(bert_dir(tmp_path / "bert")), max_seq_length=32)
    pooling = Pooling(body.get_embedding_dimension(), pooling_mode="mean")
    model = SentenceTransformer(modules=[body, pooling, Normalize()], device="cpu")
    sentences = ["Hello world", "the cat sat on the mat", "a dog runs fast", "the dog is a cat"]
    ref = model.encode(sentences, convert_to_tensor=True)
    assert ref.shape == (4, 32)
    emb = model.encode(sentences, convert_to_tensor=True, device="neuron")
    assert emb.device == torch.device("neuron:0")
    torch.testing.assert_close(emb.cpu(), ref, rtol=1e-4, atol=1e-5)
    # Moved to the device for good: numpy out, batches of two (padding differs).
    model.to("neuron")
    assert model.device.type == "neuron"
    arr = model.encode(sentences, batch_size=2)
    torch.testing.assert_close(torch.from_numpy(arr), ref, rtol=1e-4, atol=1e-5)
