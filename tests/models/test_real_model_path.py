"""A Qwen2 folder with a subword tokenizer and a chat template (every verb on a pretrained model:
test_smollm2.py)."""

from tempering.models import load_policy
from tempering.models.chat import ChatFormat
from tempering.models.toy_qwen import toy_qwen2


def test_the_toy_qwen_folder_loads_like_a_real_one(tmp_path):
    path = toy_qwen2(tmp_path / "q", ["Mia has 12 apples and gives 5 away.", "12+5=17", "apples apples apples"] * 20)
    model, tok = load_policy(str(path))
    assert type(model).__name__ == "Qwen2ForCausalLM" and model.config.num_key_value_heads == 2
    assert tok.eos_token == "<|im_end|>" and tok.pad_token == "<|endoftext|>"
    assert "Ġapples" in tok.get_vocab()  # subword merges, not characters
    fmt = ChatFormat(tok)
    assert fmt.use_chat_template
    prompt = tok.decode(fmt.prompt_ids("12+5="))
    assert (
        prompt
        == "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\n12+5=<|im_end|>\n<|im_start|>assistant\n"
    )
    # after an answer (which ended with its own <|im_end|>), the next user turn and the assistant header
    assert (
        tok.decode(fmt.feedback_ids("wrong", "12+5="))
        == "\n<|im_start|>user\n\nwrong\n12+5=<|im_end|>\n<|im_start|>assistant\n"
    )
