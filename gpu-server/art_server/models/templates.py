"""Chat templates for packaged models whose GGUF carries none.

Gemma 3's format, as Google's instruct models use it: turns are `<start_of_turn>user` and
`<start_of_turn>model`, each closed by `<end_of_turn>`, and content is trimmed. Gemma has no system
role: a system message is written at the top of the first user turn, followed by a blank line (or as
a user turn of its own when no user turn follows it). Any other role (a tool result the server has
already turned into text) is a user turn, and roles need not alternate.

The template must not mention the word `tools` (chat/prompt.py takes such a template to render tool
lists itself); tool lists and calls reach it as text in the hermes format.

Written for transformers' Jinja settings (trim_blocks, lstrip_blocks), hence `{{ '\\n' }}` where
a newline follows a block tag.
"""

GEMMA3_CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% if messages and messages[0].role == 'system' %}"
    "{% set system = messages[0].content | trim %}{% set turns = messages[1:] %}"
    "{% else %}{% set system = '' %}{% set turns = messages %}{% endif %}"
    "{% if system and (not turns or turns[0].role != 'user') %}"
    "<start_of_turn>user{{ '\\n' }}{{ system }}<end_of_turn>{{ '\\n' }}"
    "{% endif %}"
    "{% for message in turns %}"
    "<start_of_turn>{{ 'model' if message.role == 'assistant' else 'user' }}{{ '\\n' }}"
    "{% if loop.first and system and message.role == 'user' %}{{ system }}{{ '\\n\\n' }}{% endif %}"
    "{{ message.content | trim }}<end_of_turn>{{ '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}<start_of_turn>model{{ '\\n' }}{% endif %}"
)
