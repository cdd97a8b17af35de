"""Make the tiny, locally built models the real-engine tests serve: `python tiny_models.py OUT_DIR [--partial-miss Q]`.

Run it with the engines venv's python (it needs torch, tokenizers, transformers, safetensors). Deterministic (fixed
seeds), a few seconds, ~15 MB. Writes OUT_DIR/{target,draft-full,draft-partial,draft-none}, OUT_DIR/MODELS.md and
prints a JSON summary. These are hand-built test models, not language models; MODELS.md says what each one does.

How the models work (hidden 256 split into slots: BIAS [0,8) constant 1, C [8,90) the token's code, P [90,92) the
previous token's bit, A [92,174) and B [174,256) the two output codes):

- every token t has a random +-1 code c_t of 82 dims (chosen so codes overlap little); bit(t) = c_t[0];
- target (LlamaForCausalLM, 2 layers): layer 0 has one "previous-token" attention head whose query and key are
  constant vectors in six high-frequency RoPE pairs, phased so the score peaks at relative position -1; it copies
  bit(previous token) into P. Layer 1's MLP gates on P: it copies c_t into A when the bit is +1 and into B when -1.
  The LM head maps A to pi(t) and B to sigma(t) (pi, sigma fixed random maps onto the word tokens). So the greedy
  continuation follows t[i+1] = pi(t[i]) if bit(t[i-1]) > 0 else sigma(t[i]): a second-order chain that depends
  on the attention reading the right KV slot (tree masks included), and never emits a special token;
- draft-full (LlamaForCausalLMEagle3, one layer): computes the same function. fc takes bit(t[i]) from the target's
  captured hidden state; a self-attention head (RoPE peak at relative position 0) copies the input token's code
  into C and the previous bit into P while cancelling the carried state, and its MLP repeats the target's gated
  copy (plus cancelling the stale A/B of the previous step). Every draft token is accepted: accept length 4.0 at
  (steps, topk, draft tokens) = (3, 1, 4);
- draft-partial: draft-full whose LM head is wrong on purpose for a random fraction Q (--partial-miss, default
  0.4) of input tokens: there it ranks a wrong token first and the right one second (weight --partial-second,
  default 0.5). Per-step acceptance ~1-Q, so accept length ~1+(1-Q)+(1-Q)^2+(1-Q)^3 (~2.2 at Q=0.4) with topk 1,
  and higher with topk > 1, where the second choice is in the tree;
- draft-none: the same architecture with random weights: accept length ~1.0.

All weights also get tiny Gaussian noise (--noise, default 1e-3) so no layer is exactly zero.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import torch

HIDDEN, HEADS, KV_HEADS, HEAD_DIM, INTER, VOCAB, LAYERS = 256, 4, 2, 64, 512, 512, 2
ROPE_THETA, MAX_POS, EPS = 10000.0, 2048, 1e-6
BIAS, C0, P0, A0, B0, CODE = 0, 8, 90, 92, 174, 82  # slot starts and the code width
NBIAS, NP = 8, 2
ROPE_PAIRS = 6  # high-frequency RoPE pairs the positional heads use (worst off-peak score 0.83 of the peak)
ROPE_AMP = 14.0  # their amplitude: the peak beats every other position by >= 25 logits
GATE = 8.0  # MLP gate pre-activation: silu(8) ~ 8, silu(-8) ~ 0
SEED = 20261206

SPECIALS = ["<pad>", "<s>", "</s>", "<unk>", "<|system|>", "<|user|>", "<|assistant|>"]
PAD, BOS, EOS = 0, 1, 2
PUNCT = [".", ",", "?", "!", ":", "'"]
COMMON = (
    "the of and to a in is it you that he was for on are with as i his they be at one have this from or had by hot "
    "word but what some we can out other were all there when up use your how said an each she which do their time "
    "if will way about many then them write would like so these her long make thing see him two has look more day "
    "could go come did number sound no most people my over know water than call first who may down side been now "
    "find any new work part take get place made live where after back little only round man year came show every "
    "good me give our under name very through just form sentence great think say help low line differ turn cause "
    "much mean before move right boy old too same tell does set three want air well also play small end put home "
    "read hand port large spell add even land here must big high such follow act why ask men change went light "
    "kind off need house picture try us again animal point mother world near build self earth father energy power "
    "model token draft fast slow speed test"
).split()
SYLLABLES = "ka lo mi nu pe ra si to vu xe za bo di fu ge hi jo ku le mo".split()


def _words() -> list[str]:
    """The 505 word tokens: punctuation, common English words, then made-up two/three-syllable words."""
    words = list(dict.fromkeys(PUNCT + COMMON))
    seen = set(words)
    for a in SYLLABLES:
        for b in SYLLABLES:
            for c in [""] + SYLLABLES:
                w = a + b + c
                if len(words) >= VOCAB - len(SPECIALS):
                    return words
                if w not in seen:
                    words.append(w)
                    seen.add(w)
    raise AssertionError("not enough made-up words")


def write_tokenizer(out: Path) -> None:
    """A word-level tokenizer (lower-cased, split on whitespace and punctuation) with a BOS and a chat template."""
    from tokenizers import Tokenizer, normalizers, pre_tokenizers, processors
    from tokenizers.models import WordLevel
    from transformers import PreTrainedTokenizerFast

    vocab = {tok: i for i, tok in enumerate(SPECIALS + _words())}
    assert len(vocab) == VOCAB
    tok = Tokenizer(WordLevel(vocab, unk_token="<unk>"))
    tok.normalizer = normalizers.Lowercase()
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", pair="<s> $A $B", special_tokens=[("<s>", BOS)])
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<s>",
        eos_token="</s>",
        unk_token="<unk>",
        pad_token="<pad>",
        additional_special_tokens=SPECIALS[4:],
        model_max_length=MAX_POS,
        clean_up_tokenization_spaces=False,
    )
    fast.chat_template = (
        "{% for message in messages %}<|{{ message['role'] }}|> {{ message['content'] }} {% endfor %}"
        "{% if add_generation_prompt %}<|assistant|>{% endif %}"
    )
    fast.save_pretrained(str(out))


# ---------------------------------------------------------------------------------------------------------------
# The hand-built functions


class Plan:
    """Everything random in the models, drawn once from SEED: token codes and the two successor maps."""

    def __init__(self, partial_miss: float) -> None:
        gen = torch.Generator().manual_seed(SEED)
        self.codes = _pick_codes(gen)
        first_word = len(SPECIALS)
        words = torch.arange(first_word, VOCAB)
        self.pi = torch.empty(VOCAB, dtype=torch.long)
        self.sigma = torch.empty(VOCAB, dtype=torch.long)
        self.pi[first_word:] = words[torch.randperm(len(words), generator=gen)]
        self.sigma[first_word:] = words[torch.randperm(len(words), generator=gen)]
        self.pi[:first_word] = words[torch.randint(len(words), (first_word,), generator=gen)]
        self.sigma[:first_word] = words[torch.randint(len(words), (first_word,), generator=gen)]
        # draft-partial: on a random set of input tokens the draft's first choice is another token's successor
        order = torch.randperm(VOCAB, generator=gen)
        miss = order[: round(partial_miss * VOCAB)]
        self.rho = torch.arange(VOCAB)
        if len(miss) > 1:
            self.rho[miss] = miss.roll(1)
        self.noise_gen = torch.Generator().manual_seed(SEED + 1)

    def bit(self) -> torch.Tensor:
        return self.codes[:, 0]


def _pick_codes(gen: torch.Generator, limit: int = 28) -> torch.Tensor:
    """VOCAB random +-1 codes of CODE dims, each overlapping every earlier one by at most `limit` (of CODE)."""
    picked = torch.empty(VOCAB, CODE)
    n = 0
    while n < VOCAB:
        cand = torch.randint(0, 2, (CODE,), generator=gen).float() * 2 - 1
        if n == 0 or (picked[:n] @ cand).abs().max() <= limit:
            picked[n] = cand
            n += 1
    return picked


def _lm_head(plan: Plan, first: torch.Tensor, second: torch.Tensor | None = None, weight: float = 0.0) -> torch.Tensor:
    """LM head rows: token s reads A with the codes of first-map preimages of s under pi, and B likewise under
    sigma (`first` permutes the inputs before the maps; `second`, scaled by `weight`, adds a runner-up)."""
    head = torch.zeros(VOCAB, HIDDEN)
    for src, scale in ((first, 1.0), (second, weight)):
        if src is None or scale == 0.0:
            continue
        head[:, A0 : A0 + CODE].index_add_(0, plan.pi[src], plan.codes * scale)
        head[:, B0 : B0 + CODE].index_add_(0, plan.sigma[src], plan.codes * scale)
    return head


def _rope_qk(peak: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Constant per-head query and key vectors (HEAD_DIM) whose RoPE score peaks at relative position `peak`."""
    theta = ROPE_THETA ** (-torch.arange(HEAD_DIM // 2, dtype=torch.float64) * 2 / HEAD_DIM)
    q = torch.zeros(HEAD_DIM, dtype=torch.float64)
    k = torch.zeros(HEAD_DIM, dtype=torch.float64)
    half = HEAD_DIM // 2
    for j in range(ROPE_PAIRS):
        k[j] = ROPE_AMP
        q[j] = ROPE_AMP * math.cos(peak * theta[j])
        q[j + half] = -ROPE_AMP * math.sin(peak * theta[j])
    return q.float(), k.float()


def _embed(plan: Plan) -> torch.Tensor:
    embed = torch.zeros(VOCAB, HIDDEN)
    embed[:, BIAS : BIAS + NBIAS] = 1.0
    embed[:, C0 : C0 + CODE] = plan.codes
    return embed


def _rms(*parts: tuple[int, float]) -> float:
    """RMS over HIDDEN of a vector with `n` entries of magnitude `v` for each (n, v)."""
    return math.sqrt(sum(n * v * v for n, v in parts) / HIDDEN)


def _decoder_layer(p: str, *mats: torch.Tensor) -> dict[str, torch.Tensor]:
    """One Llama decoder layer's weights under prefix ``p`` (the target's ``model.layers.<i>.``, the EAGLE3 head's
    ``midlayer.``): q, k, v, o, gate, up, down in that order, and unit RMS norms."""
    names = ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj", "mlp.gate_proj",
             "mlp.up_proj", "mlp.down_proj")  # fmt: skip
    layer = {f"{p}{name}.weight": m for name, m in zip(names, mats, strict=True)}
    layer[p + "input_layernorm.weight"] = torch.ones(HIDDEN)
    layer[p + "post_attention_layernorm.weight"] = torch.ones(HIDDEN)
    return layer


def target_weights(plan: Plan) -> dict[str, torch.Tensor]:
    """Weights of the target (see the module docstring)."""
    w: dict[str, torch.Tensor] = {"model.embed_tokens.weight": _embed(plan)}
    r_in = _rms((NBIAS, 1.0), (CODE, 1.0))  # RMS of every embedding row
    for layer in range(LAYERS):
        p = f"model.layers.{layer}."
        q = torch.zeros(HEADS * HEAD_DIM, HIDDEN)
        k = torch.zeros(KV_HEADS * HEAD_DIM, HIDDEN)
        v = torch.zeros(KV_HEADS * HEAD_DIM, HIDDEN)
        o = torch.zeros(HIDDEN, HEADS * HEAD_DIM)
        gate = torch.zeros(INTER, HIDDEN)
        up = torch.zeros(INTER, HIDDEN)
        down = torch.zeros(HIDDEN, INTER)
        if layer == 0:  # head 0 (KV head 0): attend to the previous position, copy its bit into P
            qv, kv = _rope_qk(peak=1)
            q[:HEAD_DIM, BIAS] = qv * r_in
            k[:HEAD_DIM, BIAS] = kv * r_in
            v[0, C0] = r_in
            o[P0 : P0 + NP, 0] = 1.0
        else:  # MLP: c_t into A if the previous bit is +1, into B if -1
            r_mid = _rms((NBIAS, 1.0), (CODE, 1.0), (NP, 1.0))
            for j in range(CODE):
                for unit, sign, out in ((j, 1.0, A0), (CODE + j, -1.0, B0)):
                    gate[unit, P0 : P0 + NP] = sign * GATE * r_mid / NP
                    up[unit, C0 + j] = r_mid
                    down[out + j, unit] = 1.0
        w.update(_decoder_layer(p, q, k, v, o, gate, up, down))
    w["model.norm.weight"] = torch.ones(HIDDEN)
    w["lm_head.weight"] = _lm_head(plan, torch.arange(VOCAB))
    return w


# Draft state scales: the carried hidden state is dominated by a constant (KAPPA in BIAS) so its RMS barely
# changes between steps, which is what lets the attention cancel the previous step's C and P exactly enough.
KAPPA, S_C, S_P, S_OUT = 30.0, 1.0, 1.0, 0.25
FC_AUX = 2  # captured target layers: the inputs of layers 0 and 1 (eagle_aux_hidden_state_layer_ids [-1, 0])


def draft_weights(plan: Plan, head: torch.Tensor) -> dict[str, torch.Tensor]:
    """Weights of an EAGLE3 head computing the target's function, with LM head `head` (see the docstring)."""
    r_e = _rms((NBIAS, 1.0), (CODE, 1.0))  # RMS of an embedding row: input_layernorm divides by it
    r_h1 = _rms((NBIAS, KAPPA), (1, S_C))  # RMS of the fc output (first draft step)
    fresh = GATE * S_OUT  # magnitude of the A/B entries the MLP writes
    r_h = _rms((NBIAS, KAPPA), (CODE, S_C), (NP, S_P), (CODE, fresh))  # RMS of a draft step's output
    r_h = (r_h + r_h1) / 2  # used for cancelling; the two differ by < 3 %
    r_1 = r_h  # RMS of the residual entering the MLP after step 1 (same content as an output)

    # Both captured states (inputs of target layers 0 and 1) hold t[i]'s embedding in BIAS and C; read half from each.
    fc = torch.zeros(HIDDEN, FC_AUX * HIDDEN)
    for aux in range(FC_AUX):
        fc[BIAS : BIAS + NBIAS, aux * HIDDEN + BIAS] = KAPPA / FC_AUX
        fc[C0, aux * HIDDEN + C0] = S_C / FC_AUX

    two = 2 * HIDDEN  # attention input: [input_layernorm(embed), hidden_norm(h)]
    qv, kv = _rope_qk(peak=0)
    q = torch.zeros(HEADS * HEAD_DIM, two)
    k = torch.zeros(KV_HEADS * HEAD_DIM, two)
    for head_i in range(HEADS):
        q[head_i * HEAD_DIM : (head_i + 1) * HEAD_DIM, BIAS] = qv * r_e
    for kv_i in range(KV_HEADS):
        k[kv_i * HEAD_DIM : (kv_i + 1) * HEAD_DIM, BIAS] = kv * r_e
    v = torch.zeros(KV_HEADS * HEAD_DIM, two)
    o = torch.zeros(HIDDEN, HEADS * HEAD_DIM)
    # V row per C dim: + input token's code, - the carried C. KV head 0 -> q head 0, KV head 1 -> q head 2.
    for row in range(CODE + 1):
        o_col = row + (0 if row < HEAD_DIM else HEAD_DIM)  # V rows 64.. belong to KV head 1, read by q head 2
        if row < CODE:
            v[row, C0 + row] = S_C * r_e
            v[row, HIDDEN + C0 + row] = -r_h
            o[C0 + row, o_col] = 1.0
        else:  # the last row: P = bit(previous token) (carried in C0 of h), minus the carried P
            v[row, HIDDEN + C0] = S_P * r_h / S_C
            v[row, HIDDEN + P0] = -r_h
            o[P0 : P0 + NP, o_col] = 1.0

    gate = torch.zeros(INTER, HIDDEN)
    up = torch.zeros(INTER, HIDDEN)
    down = torch.zeros(HIDDEN, INTER)
    cancel_gate = 10.0  # silu(10) = 9.9995: these units are linear
    for j in range(CODE):
        for unit, sign, out in ((j, 1.0, A0), (CODE + j, -1.0, B0)):
            gate[unit, P0 : P0 + NP] = sign * GATE * r_1 / (NP * S_P)
            up[unit, C0 + j] = r_1 / S_C
            down[out + j, unit] = S_OUT
        for unit, slot in ((2 * CODE + j, A0), (3 * CODE + j, B0)):
            gate[unit, BIAS] = cancel_gate * r_1 / KAPPA
            up[unit, slot + j] = 1.0
            down[slot + j, unit] = -r_1 / (cancel_gate / (1 + math.exp(-cancel_gate)))
    p = "midlayer."
    return {
        "fc.weight": fc,
        p + "hidden_norm.weight": torch.ones(HIDDEN),
        **_decoder_layer(p, q, k, v, o, gate, up, down),
        "norm.weight": torch.ones(HIDDEN),
        "lm_head.weight": head,
    }


def random_draft_weights(plan: Plan) -> dict[str, torch.Tensor]:
    """draft-none: the EAGLE3 layout with N(0, 0.02) matrices and unit norms."""
    shapes = {k: t.shape for k, t in draft_weights(plan, torch.zeros(VOCAB, HIDDEN)).items()}
    gen = torch.Generator().manual_seed(SEED + 2)
    return {k: torch.ones(s) if len(s) == 1 else torch.randn(s, generator=gen) * 0.02 for k, s in shapes.items()}


# ---------------------------------------------------------------------------------------------------------------
# Writing the model directories


def _config(draft: bool) -> dict:
    config = {
        "architectures": ["LlamaForCausalLMEagle3" if draft else "LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": HIDDEN,
        "intermediate_size": INTER,
        "num_hidden_layers": 1 if draft else LAYERS,
        "num_attention_heads": HEADS,
        "num_key_value_heads": KV_HEADS,
        "head_dim": HEAD_DIM,
        "hidden_act": "silu",
        "max_position_embeddings": MAX_POS,
        "rms_norm_eps": EPS,
        "rope_theta": ROPE_THETA,
        "vocab_size": VOCAB,
        "bos_token_id": BOS,
        "eos_token_id": EOS,
        "pad_token_id": PAD,
        "tie_word_embeddings": False,
        "attention_bias": False,
        "mlp_bias": False,
        "torch_dtype": "bfloat16",
        "dtype": "bfloat16",
    }
    if draft:
        config.update(
            {
                "draft_vocab_size": VOCAB,
                "target_hidden_size": HIDDEN,
                "eagle_config": {"eagle_aux_hidden_state_layer_ids": [-1, 0]},
            }
        )
    return config


def _with_noise(weights: dict[str, torch.Tensor], noise: float, gen: torch.Generator) -> dict[str, torch.Tensor]:
    """Tiny Gaussian noise on every matrix (not the norms, not the embedding) so no layer is exactly zero."""
    out = {}
    for name, t in weights.items():
        if t.dim() == 2 and noise > 0 and "embed_tokens" not in name:
            t = t + torch.randn(t.shape, generator=gen) * noise
        out[name] = t
    return out


def write_model(out: Path, weights: dict[str, torch.Tensor], draft: bool) -> None:
    from safetensors.torch import save_file

    out.mkdir(parents=True, exist_ok=True)
    tensors = {k: v.to(torch.bfloat16).contiguous() for k, v in weights.items()}
    if draft:
        tensors["d2t"] = torch.zeros(VOCAB, dtype=torch.long)  # draft id -> target id offsets (same vocab)
        tensors["t2d"] = torch.ones(VOCAB, dtype=torch.bool)
    save_file(tensors, str(out / "model.safetensors"), metadata={"format": "pt"})
    (out / "config.json").write_text(json.dumps(_config(draft), indent=2) + "\n")
    if not draft:
        gen_cfg = {"bos_token_id": BOS, "eos_token_id": EOS, "pad_token_id": PAD, "do_sample": False}
        (out / "generation_config.json").write_text(json.dumps(gen_cfg, indent=2) + "\n")


# ---------------------------------------------------------------------------------------------------------------
# A float32 reference forward of both architectures, to check the models before any server sees them


def _norm(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + EPS) * w


def _attention(x: torch.Tensor, w: dict[str, torch.Tensor], p: str) -> torch.Tensor:
    """Causal GQA self-attention with NeoX RoPE over positions 0..n-1 (what sglang computes for one sequence)."""
    n = x.shape[0]
    q = (x @ w[p + "q_proj.weight"].T).view(n, HEADS, HEAD_DIM)
    k = (x @ w[p + "k_proj.weight"].T).view(n, KV_HEADS, HEAD_DIM)
    v = (x @ w[p + "v_proj.weight"].T).view(n, KV_HEADS, HEAD_DIM)
    theta = ROPE_THETA ** (-torch.arange(HEAD_DIM // 2).float() * 2 / HEAD_DIM)
    ang = torch.arange(n).float()[:, None] * theta[None, :]
    cos, sin = ang.cos()[:, None, :], ang.sin()[:, None, :]

    def rope(t: torch.Tensor) -> torch.Tensor:
        t1, t2 = t.chunk(2, dim=-1)
        return torch.cat((t1 * cos - t2 * sin, t2 * cos + t1 * sin), dim=-1)

    q, k = rope(q), rope(k).repeat_interleave(HEADS // KV_HEADS, 1)
    v = v.repeat_interleave(HEADS // KV_HEADS, 1)
    scores = torch.einsum("nhd,mhd->hnm", q, k) / math.sqrt(HEAD_DIM)
    scores = scores.masked_fill(~torch.ones(n, n, dtype=torch.bool).tril(), float("-inf"))
    out = torch.einsum("hnm,mhd->nhd", scores.softmax(-1), v).reshape(n, HEADS * HEAD_DIM)
    return out @ w[p + "o_proj.weight"].T


def _mlp(x: torch.Tensor, w: dict[str, torch.Tensor], p: str) -> torch.Tensor:
    gate = torch.nn.functional.silu(x @ w[p + "gate_proj.weight"].T)
    return (gate * (x @ w[p + "up_proj.weight"].T)) @ w[p + "down_proj.weight"].T


def target_forward(w: dict[str, torch.Tensor], ids: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """Logits [n, VOCAB] and the EAGLE3 aux states [n, 2 * HIDDEN] (inputs of layers 0 and 1)."""
    h = w["model.embed_tokens.weight"][ids]
    aux = []
    for layer in range(LAYERS):
        p = f"model.layers.{layer}."
        aux.append(h)
        h = h + _attention(_norm(h, w[p + "input_layernorm.weight"]), w, p + "self_attn.")
        h = h + _mlp(_norm(h, w[p + "post_attention_layernorm.weight"]), w, p + "mlp.")
    return _norm(h, w["model.norm.weight"]) @ w["lm_head.weight"].T, torch.cat(aux, dim=-1)


def draft_forward(w: dict[str, torch.Tensor], embeds: torch.Tensor, hidden: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """EAGLE3 head over positions 0..n-1: logits and the carried (pre-norm) state, as sglang's llama_eagle3."""
    if hidden.shape[-1] != HIDDEN:
        hidden = hidden @ w["fc.weight"].T
    p = "midlayer."
    x = torch.cat((_norm(embeds, w[p + "input_layernorm.weight"]), _norm(hidden, w[p + "hidden_norm.weight"])), -1)
    r = hidden + _attention(x, w, p + "self_attn.")
    out = r + _mlp(_norm(r, w[p + "post_attention_layernorm.weight"]), w, p + "mlp.")
    return _norm(out, w["norm.weight"]) @ w["lm_head.weight"].T, out


def simulate_accept_length(
    target: dict[str, torch.Tensor], draft: dict[str, torch.Tensor], prompt: list[int], new_tokens: int, steps: int = 3
) -> tuple[list[int], float]:
    """Greedy output of the target and the mean EAGLE3 accept length at (steps, topk 1, steps + 1 tokens)."""
    ids = list(prompt)
    while len(ids) < len(prompt) + new_tokens:
        ids.append(int(target_forward(target, ids)[0][-1].argmax()))
    aux = target_forward(target, ids)[1]
    embed, fc = target["model.embed_tokens.weight"], draft["fc.weight"]
    rounds, i = [], len(prompt)  # ids[i] is the round's bonus token; draft position j reads ids[j + 1], aux[j]
    while i + steps < len(ids):
        tokens, hidden, accepted = list(ids[1 : i + 1]), aux[:i] @ fc.T, 0
        for s in range(steps):
            logits, out = draft_forward(draft, embed[tokens], hidden)
            guess = int(logits[-1].argmax())
            if guess != ids[i + 1 + s]:
                break
            accepted += 1
            tokens.append(guess)
            hidden = torch.cat((hidden, out[-1:]))
        rounds.append(accepted + 1)
        i += accepted + 1
    return ids[len(prompt) :], sum(rounds) / max(len(rounds), 1)


# ---------------------------------------------------------------------------------------------------------------

MODELS_MD = """# Tiny test models (made locally by tests/engines_cpu/tiny_models.py)

These are NOT language models and NOT downloaded: they are hand-built, deterministic (fixed seeds) test models
for running the real sglang EAGLE3 speculative decoding on a CPU in the test suite. Vocabulary: 512 word-level
tokens (7 special tokens, punctuation, ~200 common English words, made-up words); the chat template is
`<|role|> content ... <|assistant|>`.

- `target/`: LlamaForCausalLM (hidden 256, 2 layers, 4 heads / 2 KV heads, vocab 512, bf16). Its greedy
  continuation is a fixed second-order chain: next = pi(current) if bit(previous) > 0 else sigma(current), where
  the previous token is read by a RoPE attention head that attends to relative position -1 (so wrong KV slots or
  tree masks change the output). Output looks like word salad and never contains a special token.
- `draft-full/`: LlamaForCausalLMEagle3 head computing the same chain: every draft token is accepted (accept length
  4.0 at steps 3, topk 1, 4 draft tokens).
- `draft-partial/`: the same head, wrong on purpose (first choice wrong, right token second) for a random {miss}
  of input tokens: partial acceptance, expected accept length {partial:.2f} at (3, 1, 4) from the reference forward.
- `draft-none/`: the same architecture with random weights: accept length ~1.0.

Summary of this build: see `summary.json`.
"""

CHECK_PROMPTS = [
    [BOS, 40, 41, 42, 43, 44],
    [BOS, 5, 100, 200, 300, 6],
    [BOS, 7, 8, 9],
]


def build(out_dir: Path, partial_miss: float, partial_second: float, noise: float) -> dict:
    """Write every model and return the summary (with reference accept lengths at (3, 1, 4))."""
    torch.manual_seed(SEED)
    plan = Plan(partial_miss)
    gen = plan.noise_gen
    target = _with_noise(target_weights(plan), noise, gen)
    drafts = {
        "draft-full": _with_noise(draft_weights(plan, _lm_head(plan, torch.arange(VOCAB))), noise, gen),
        "draft-partial": _with_noise(
            draft_weights(plan, _lm_head(plan, plan.rho, torch.arange(VOCAB), partial_second)), noise, gen
        ),
        "draft-none": random_draft_weights(plan),
    }
    write_model(out_dir / "target", target, draft=False)
    write_tokenizer(out_dir / "target")
    for name, weights in drafts.items():
        write_model(out_dir / name, weights, draft=True)

    rounded = {k: v.to(torch.bfloat16).float() for k, v in target.items()}
    summary: dict = {"partial_miss": partial_miss, "partial_second": partial_second, "noise": noise, "models": {}}
    for name, weights in drafts.items():
        d = {k: v.to(torch.bfloat16).float() for k, v in weights.items()}
        lengths = [simulate_accept_length(rounded, d, p, 40)[1] for p in CHECK_PROMPTS]
        summary["models"][name] = {"dir": name, "ref_accept_len_3_1_4": round(sum(lengths) / 3, 3)}
    ids = list(CHECK_PROMPTS[0])
    while len(ids) < 30:
        ids.append(int(target_forward(rounded, ids)[0][-1].argmax()))
    bits = plan.bit().tolist()
    chain = all(
        ids[i + 1] == int((plan.pi if bits[ids[i - 1]] > 0 else plan.sigma)[ids[i]]) for i in range(5, len(ids) - 1)
    )
    assert chain, "the target does not follow its chain: the hand-built weights are broken"
    summary["models"]["target"] = {"dir": "target", "greedy_sample_ids": ids[6:]}
    (out_dir / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    partial = summary["models"]["draft-partial"]["ref_accept_len_3_1_4"]
    (out_dir / "MODELS.md").write_text(MODELS_MD.format(miss=f"{partial_miss:.0%}", partial=partial))
    return summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--partial-miss", type=float, default=0.4, help="draft-partial: fraction of wrong tokens")
    parser.add_argument("--partial-second", type=float, default=0.5, help="draft-partial: runner-up weight")
    parser.add_argument("--noise", type=float, default=1e-3, help="std of the noise added to every matrix")
    args = parser.parse_args()
    torch.set_num_threads(1)  # tiny matrices: threads only spin (25 s instead of 5 on a busy 2-core machine)
    summary = build(args.out_dir, args.partial_miss, args.partial_second, args.noise)
    print(json.dumps({"out_dir": str(args.out_dir.resolve()), **summary}, indent=2))


if __name__ == "__main__":
    main()
