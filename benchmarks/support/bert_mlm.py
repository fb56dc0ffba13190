"""A small BERT pretrained on the quality table's text the way its users would: a WordPiece
vocabulary trained with `tokenizers`, `transformers`' `BertForMaskedLM` and its masked-LM
objective (`DataCollatorForLanguageModeling`, 15% of the wordpieces). It is saved with
`save_pretrained` for allennlp's `pretrained_transformer_mismatched` indexer and embedder.

Text: every line's wordpieces, concatenated and cut into blocks of `BLOCK` (as `run_mlm`'s
`group_texts`). Convergence as the biLMs': an epoch over the training blocks, then the
validation loss (the same masks every epoch); stops once it has not improved for `--patience`
epochs, at most `--epochs`; the best epoch's weights are kept. The held-out figure is the
masked-LM loss of the held-out blocks (fixed masks) and its exponential, the masked-LM
perplexity: a different quantity from a biLM's perplexity, not comparable to it.

    python -m benchmarks.support.bert_mlm --train F --valid F --heldout F --out DIR
        [--epochs 10] [--patience 1]
-> DIR/model (config, weights, tokenizer) and DIR/result.json.
"""

import argparse
import json
import math
import shutil
from pathlib import Path

SIZE = {  # about the demo biLMs' size: 4 layers of 256 (2 layers x 2 directions of 128)
    "num_hidden_layers": 4,
    "hidden_size": 256,
    "num_attention_heads": 4,
    "intermediate_size": 1024,
    "max_position_embeddings": 512,
}
VOCABULARY = 8000  # wordpieces
BLOCK = 128  # wordpieces per training example
BATCH = 16  # blocks per step
LEARNING_RATE, WARMUP, WEIGHT_DECAY = 5e-4, 0.06, 0.01  # AdamW, linear warm-up and decay
MASK_SEED = 1234  # the validation and held-out masks


def train_wordpieces(text: Path, folder: Path):
    """A cased WordPiece vocabulary of `VOCABULARY` pieces (words seen twice or more) ->
    `BertTokenizerFast` saved in `folder`."""
    from tokenizers import BertWordPieceTokenizer
    from transformers import BertTokenizerFast

    pieces = BertWordPieceTokenizer(lowercase=False, strip_accents=False)
    pieces.train([str(text)], vocab_size=VOCABULARY, min_frequency=2, show_progress=False)
    folder.mkdir(parents=True, exist_ok=True)
    pieces.save_model(str(folder))
    tokenizer = BertTokenizerFast(vocab_file=str(folder / "vocab.txt"), do_lower_case=False)
    tokenizer.save_pretrained(str(folder))
    return tokenizer


def blocks(tokenizer, text: Path):
    """Every line's wordpieces, concatenated, as (blocks, BLOCK) ids, each [CLS] ... [SEP]."""
    import torch

    lines = [line for line in text.read_text(encoding="utf-8").splitlines() if line.strip()]
    ids = [
        i for encoded in tokenizer(lines, add_special_tokens=False)["input_ids"] for i in encoded
    ]
    inner = BLOCK - 2
    rows = [ids[start : start + inner] for start in range(0, len(ids) - inner + 1, inner)]
    return torch.tensor(
        [[tokenizer.cls_token_id, *row, tokenizer.sep_token_id] for row in rows or [ids]]
    )


def masked_loss(model, collator, data) -> float:
    """Mean masked-LM loss over `data`'s blocks, the same masks at every call."""
    import torch

    model.eval()
    total = count = 0.0
    with torch.no_grad(), torch.random.fork_rng():
        torch.manual_seed(MASK_SEED)
        for batch in data.split(BATCH):
            inputs = collator([{"input_ids": row} for row in batch])
            masked = float((inputs["labels"] != -100).sum())
            total += float(model(**inputs).loss) * masked
            count += masked
    model.train()
    return total / count


def pretrain(args: argparse.Namespace) -> dict:
    import torch
    from transformers import (
        BertConfig,
        BertForMaskedLM,
        DataCollatorForLanguageModeling,
        get_linear_schedule_with_warmup,
    )

    torch.manual_seed(args.seed)
    model_dir = args.out / "model"
    shutil.rmtree(model_dir, ignore_errors=True)  # left by an interrupted run
    tokenizer = train_wordpieces(args.train, model_dir)
    data = {
        name: blocks(tokenizer, path)
        for name, path in (("train", args.train), ("valid", args.valid), ("heldout", args.heldout))
    }
    config = BertConfig(vocab_size=len(tokenizer), **SIZE)
    model = BertForMaskedLM(config)
    collator = DataCollatorForLanguageModeling(tokenizer, mlm_probability=0.15)
    optimizer = torch.optim.AdamW(model.parameters(), lr=LEARNING_RATE, weight_decay=WEIGHT_DECAY)
    steps = args.epochs * math.ceil(len(data["train"]) / BATCH)
    schedule = get_linear_schedule_with_warmup(optimizer, int(WARMUP * steps), steps)
    best, best_epoch, losses = math.inf, 0, []
    for epoch in range(1, args.epochs + 1):
        for batch in data["train"][torch.randperm(len(data["train"]))].split(BATCH):
            loss = model(**collator([{"input_ids": row} for row in batch])).loss
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            schedule.step()
            optimizer.zero_grad()
        losses.append(round(masked_loss(model, collator, data["valid"]), 4))
        print(f"epoch {epoch}: validation masked-LM loss {losses[-1]}", flush=True)
        if losses[-1] < best:
            best, best_epoch = losses[-1], epoch
            model.save_pretrained(str(model_dir))
        elif epoch - best_epoch >= args.patience:
            break
    model = BertForMaskedLM.from_pretrained(str(model_dir))
    heldout = masked_loss(model, collator, data["heldout"])
    return {
        "model": str(model_dir),
        "width": config.hidden_size,
        "parameters": sum(p.numel() for p in model.parameters()),
        "wordpieces": len(tokenizer),
        "training_blocks": len(data["train"]),
        "epochs_run": len(losses),
        "best_epoch": best_epoch,
        "validation_losses": losses,
        "heldout_mlm_loss": round(heldout, 4),
        "heldout_mlm_perplexity": round(math.exp(heldout), 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    for name in ("train", "valid", "heldout", "out"):
        parser.add_argument(f"--{name}", type=Path, required=True)
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--patience", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    result = pretrain(args)
    (args.out / "result.json").write_text(json.dumps(result))


if __name__ == "__main__":
    main()
