"""The prompts of the real-engine tests: words of the tiny tokenizer's vocabulary (unknown ones become <unk>)."""

PROMPTS = [
    "the model can write a long sentence about energy and power",
    "how fast is the draft ?",
    "one two three",
    "water , earth , light and air make the world",
    "kabo lomi nupe rasi tovu",
    "tell me a little more about the old house near the water and the big animal that lives there",
]
