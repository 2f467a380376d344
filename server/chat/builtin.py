"""The names of b10621's built-in chat templates (src/llama-chat.cpp LLM_CHAT_TEMPLATES).

mlxcel has no built-in template library: an MLX checkpoint carries its own template. A bare name given
to --chat-template would otherwise become the template text itself, so these names are refused."""

BUILTIN_TEMPLATES = frozenset((
    "chatml llama2 llama2-sys llama2-sys-bos llama2-sys-strip mistral-v1 mistral-v3 mistral-v3-tekken mistral-v7 "
    "mistral-v7-tekken phi3 phi4 falcon3 zephyr monarch gemma orion openchat vicuna vicuna-orca deepseek deepseek2 "
    "deepseek3 deepseek-ocr command-r llama3 chatglm3 chatglm4 glmedge minicpm exaone3 exaone4 exaone-moe "
    "rwkv-world granite granite-4.0 granite-4.1 gigachat megrez yandex bailing bailing-think bailing2 llama4 smolvlm "
    "hunyuan-moe gpt-oss hunyuan-dense hunyuan-vl kimi-k2 seed_oss grok-2 pangu-embedded solar-open"
).split())
assert len(BUILTIN_TEMPLATES) == 54
