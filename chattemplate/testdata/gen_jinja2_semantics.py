"""Writes jinja2_semantics.json: small templates rendered by the reference
Jinja2 in the environment transformers builds for apply_chat_template
(src/transformers/utils/chat_template_utils.py, _cached_compile_jinja_template),
with the variables chattemplate.Render always passes (messages, tools,
documents, add_generation_prompt) plus each case's own.

Run with python3 and Jinja2 >= 3.1 from this directory:
    python3 gen_jinja2_semantics.py
The Go tests only read the JSON; they never run this script.
"""
import datetime
import json

import jinja2
import jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment

CLOCK = datetime.datetime(2026, 1, 5, 15, 4, 5, 123456)  # naive, as datetime.now()


class AssistantTracker(jinja2.ext.Extension):
    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_generation_support"), [], [], body).set_lineno(lineno)

    def _generation_support(self, caller):
        return caller()


def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def strftime_now(format):
    return CLOCK.strftime(format)


env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                    extensions=[AssistantTracker, jinja2.ext.loopcontrols])
env.filters["tojson"] = tojson
env.globals["raise_exception"] = raise_exception
env.globals["strftime_now"] = strftime_now

MSGS = [{"role": "user", "content": "a"}, {"role": "assistant", "content": ""}, {"role": "user", "content": "c"}]

CASES = [
    # Python string methods templates call.
    ("str-methods", "{{ 'abc'.startswith('a') }}|{{ 'abc'.endswith('c') }}|{{ '  a b  '.strip() }}|{{ 'xxaxx'.strip('x') }}|{{ '\\n\\na\\n'.lstrip('\\n') }}|{{ 'a\\n\\n'.rstrip() }}|{{ 'a\\n'.rstrip('\\n') }}", {}),
    ("str-split", "{{ 'a b  c'.split() }}|{{ 'a,b,,c'.split(',') }}|{{ 'a</think>b'.split('</think>')[-1] }}|{{ 'x<think>y</think>z'.split('</think>')[0].split('<think>')[-1] }}", {}),
    ("str-case-replace", "{{ 'aXbX'.replace('X','-') }}|{{ 'aXbX'.replace('X','-',1) }}|{{ 'abc'.upper() }}|{{ 'ABC'.lower() }}|{{ 'hello world'.title() }}|{{ 'hello'.capitalize() }}|{{ 'abcabc'.find('c') }}|{{ 'abcabc'.count('b') }}", {}),
    # Tests.
    ("tests-types", "{{ x is string }}|{{ x is mapping }}|{{ d is mapping }}|{{ l is sequence }}|{{ d is iterable }}|{{ n is number }}|{{ f is float }}|{{ n is integer }}|{{ b is boolean }}|{{ nothing is defined }}|{{ nv is none }}|{{ nv is defined }}|{{ b is true }}|{{ b is false }}", {"x": "s", "d": {"a": 1}, "l": [1], "n": 3, "f": 1.5, "b": True, "nv": None}),
    ("tests-defined-not-none", "{% if x is defined and x is not none %}def{% else %}undef{% endif %}|{% if y is not defined %}nd{% endif %}|{{ x is false }}|{{ not x }}", {"x": False}),
    # namespace, loop variables, loop controls, for-else, loop filter.
    ("namespace", "{% set ns = namespace(a=1, b='x', found=false) %}{% for i in [1,2,3] %}{% set ns.a = ns.a + i %}{% if i == 2 %}{% set ns.found = true %}{% endif %}{% endfor %}{{ ns.a }}{{ ns.b }}{{ ns.found }}", {}),
    ("loop-vars", "{% for i in l %}{{ loop.index }}{{ loop.index0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }}{{ loop.revindex }}{{ loop.revindex0 }}{{ loop.previtem }}{{ loop.nextitem }};{% endfor %}", {"l": ["a", "b", "c"]}),
    ("loop-cycle", "{% for i in l %}{{ loop.cycle('x','y') }}{% endfor %}", {"l": [1, 2, 3]}),
    ("loop-controls", "{% for i in l %}{% if i == 2 %}{% continue %}{% endif %}{% if i == 4 %}{% break %}{% endif %}{{ i }}{% endfor %}", {"l": [1, 2, 3, 4, 5]}),
    ("for-else-filter", "{% for x in l if x > 1 %}{{ x }}{% else %}empty{% endfor %}|{% for x in [] %}{{ x }}{% else %}empty{% endfor %}", {"l": [1, 2, 3]}),
    ("for-unpack", "{% for k, v in d.items() %}{{ k }}={{ v }},{% endfor %}|{% for k, v in d|items %}{{ k }}={{ v }},{% endfor %}|{% for a, b in [[1,2],[3,4]] %}{{ a }}{{ b }}{% endfor %}", {"d": {"b": 1, "a": 2}}),
    ("scoping", "{% set x = 'outer' %}{% for i in [1] %}{% set x = 'inner' %}{% endfor %}{{ x }}", {}),
    # Indexing and slicing.
    ("slicing", "{{ l[::-1] }}|{{ l[1:] }}|{{ l[:-1] }}|{{ s[1:3] }}|{{ s[::-1] }}|{{ l[-1] }}|{{ l[::2] }}|{{ s[0] }}|{{ s[-1] }}", {"l": [1, 2, 3, 4], "s": "hello"}),
    ("messages-index", "{% for m in messages %}{{ loop.index0 }}:{{ messages[loop.index0 - 1].role if not loop.first else '-' }}:{{ m['content'] }};{% endfor %}{{ messages|length - 1 }}", {}),
    # Filters.
    ("length-trim", "{{ s|length }}|{{ l|length }}|{{ d|length }}|{{ '  x '|trim }}|{{ l|count }}", {"s": "h\u00e9llo", "l": [1, 2], "d": {"b": 1, "a": 2}}),
    ("in-operator", "{{ 'a' in 'cat' }}|{{ 1 in l }}|{{ 'a' in d }}|{{ 'z' not in d }}|{{ '</think>' in s }}", {"l": [1, 2], "d": {"a": 1}, "s": "x</think>y"}),
    ("dict-methods", "{{ d.get('a') }}|{{ d.get('z') }}|{{ d.get('z', 'dflt') }}|{{ d.keys()|list }}|{{ d.values()|list }}|{{ d['a'] }}|{{ d.a }}", {"d": {"a": 1, "b": [1, 2]}}),
    ("select-map-join", "{{ msgs|selectattr('role','equalto','user')|list|length }}|{{ msgs|map(attribute='role')|join(',') }}|{{ msgs|rejectattr('role','equalto','user')|map(attribute='role')|list }}|{{ msgs|selectattr('content')|list|length }}|{{ msgs|rejectattr('content')|list|length }}", {"msgs": MSGS}),
    ("map-dotted-default", "{{ tl|map(attribute='function.name')|join(', ') }}|{{ tl|map(attribute='function.missing', default='?')|list }}|{{ tl|map('tojson')|join(';') }}", {"tl": [{"function": {"name": "a"}}, {"function": {"name": "b"}}]}),
    ("join-str", "{{ l|join(', ') }}|{{ [1, none, 2.0, true]|join('-') }}|{{ d|join(',') }}", {"l": ["p", "q"], "d": {"k1": 1, "k2": 2}}),
    ("list-filters", "{{ l|first }}|{{ l|last }}|{{ l|sort|list }}|{{ l|reverse|list }}|{{ l|unique|list }}|{{ l|max }}|{{ l|min }}|{{ l|sum }}", {"l": [3, 1, 2, 3]}),
    ("default", "{{ 'x'|default('d') }}|{{ undefined_v|default('d') }}|{{ nv|default('d') }}|{{ nv|default('d', true) }}|{{ ''|default('d', true) }}", {"nv": None}),
    ("string-filter", "{{ nv|string }}|{{ 1.0|string }}|{{ 3|string ~ 'x' }}|{{ [1, 'a']|string }}", {"nv": None}),
    ("format-filter", "{{ '%s and %s'|format('a', 1) }}|{{ '%d%%'|format(5) }}|{{ '%.2f'|format(3.14159) }}|{{ '%r'|format('q') }}", {}),
    ("conversions", "{{ '3'|int + 1 }}|{{ 3.7|int }}|{{ '2.5'|float }}|{{ 1.23456|round(2) }}", {}),
    ("text-filters", "{{ 'a\\nb'|indent(2) }}|{{ 'a\\nb'|indent(2, true) }}|{{ 'one two three'|wordcount }}|{{ 'hello'|capitalize }}|{{ 'hello world'|title }}|{{ 'HeLLo'|lower }}|{{ 'x'|upper }}", {}),
    ("ranges", "{{ l|batch(2)|list }}|{{ range(3)|list }}|{{ range(1,4)|list }}|{{ range(0,10,3)|list }}", {"l": [1, 2, 3]}),
    # Printing as Python's str().
    ("print-values", "{{ nv }}|{{ true }}|{{ false }}|{{ 1.0 }}|{{ 1.5 }}|{{ 10/2 }}|{{ 7//2 }}|{{ 7%3 }}|{{ [1,'a',nv,true] }}|{{ {'a':1,'b':'x'} }}|{{ undefined_thing }}|{{ 0.1+0.2 }}", {"nv": None}),
    ("print-floats", "{{ a }}|{{ b }}|{{ c }}|{{ d }}|{{ e }}|{{ f }}", {"a": 1e16, "b": 123456789.123, "c": 1e-5, "d": -0.0, "e": 100.0, "f": 0.001}),
    ("print-repr-quotes", "{{ l }}|{{ d }}", {"l": ["it's", "say \"hi\"", "tab\there", "\u00e9\u2028"], "d": {"k": None}}),
    ("print-get-none", "{{ d.get('z') }}|{{ d.description }}", {"d": {"description": None}}),
    ("boolean-ops", "{{ x or 'dflt' }}|{{ y or 'dflt' }}|{{ x and 'yes' }}|{{ y and 'yes' }}|{{ not x }}|{{ [] or 'empty' }}", {"x": "val", "y": ""}),
    ("concat-compare", "{{ 'a' + 'b' }}|{{ 'a' ~ 1 }}|{{ 'ab' * 2 }}|{{ 1 + 2 }}|{{ 3 - 1.5 }}|{{ 1 == 1.0 }}|{{ 'a' < 'b' }}|{{ [1,2] == [1,2] }}", {}),
    ("inline-if", "{{ 'x' if true else 'y' }}|{{ 'x' if false }}|{{ 1 if 0 else 2 }}", {}),
    # Statements.
    ("set-block", "{% set x %}inner {{ 1 }}{% endset %}[{{ x }}]", {}),
    ("macro", "{% macro f(a, b='B') %}<{{ a }}{{ b }}>{% endmacro %}{{ f(1) }}{{ f(1, b=2) }}{{ f(a=3) }}", {}),
    ("generation-tag", "{%- for m in messages %}{%- if m.role == 'assistant' %}{% generation %}[{{ m.content }}]{% endgeneration %}{%- else %}({{ m.content }}){%- endif %}{%- endfor %}", {}),
    ("tag-boundaries", "{{ '}}' }}|{# it's {{ #}|{{ \"a|tojson\" }}|{{- ' x ' -}} |{%- if '%}' -%} y {%- endif %}", {}),
    ("raw-block", "{% raw %}{{ x|tojson }}{% endraw %}|{{ 1 }}", {}),
    ("trailing-newline-crlf", "a\r\n{% if true %}\r\nb\rc\r\n{% endif %}\r\n", {}),
    ("content-loop", "{%- for m in ms %}{%- if m.content is string %}S{%- else %}{%- for c in m.content %}{{ c.type }}{%- endfor %}{%- endif %}{%- endfor %}", {"ms": [{"role": "user", "content": "a"}, {"role": "user", "content": [{"type": "text", "text": "x"}, {"type": "image"}]}]}),
    # Whitespace: trim_blocks, lstrip_blocks, explicit markers.
    ("whitespace", "{% if true %}\n  a\n{% endif %}\n  {% if true %}b{% endif %}\nc  {# comment #}\n  d\n{%- if true -%}\n  e  \n{%- endif %}\n{{ 'f' }}\n  {{- 'g' }}", {}),
    ("whitespace-nested", "<\n{%- for i in [1, 2] %}\n    {%- if i == 1 %}\n        {{- 'one' }}\n    {%- else %}\n        {{- 'two' }}\n    {%- endif %}\n{%- endfor %}\n>\n", {}),
    # tojson as json.dumps(ensure_ascii=False, ...).
    ("tojson-default", "{{ x|tojson }}", {"x": {"b": 1, "a": [1, 2.5, None, True, "\u00e9\u2028\u0007\"\\/<>&'"], "c": {}, "e": [], "big": 123456789012345678, "f1": 1.0, "f2": 1e16, "f3": 1e-05, "f4": 123456789.123, "neg": -0.0}}),
    ("tojson-indent", "{{ x|tojson(indent=2) }}", {"x": {"b": 1, "a": [1, [], {}], "c": {"d": "\u00e9"}}}),
    ("tojson-indent-sort", "{{ x|tojson(indent=4, sort_keys=true) }}", {"x": {"b": 1, "a": [1, 2]}}),
    ("tojson-separators-ascii", "{{ x|tojson(separators=(',', ':')) }}|{{ x|tojson(ensure_ascii=true) }}|{{ x|tojson(indent=0) }}", {"x": {"b": "\u00e9\U0001F600", "a": [1, 2]}}),
    ("tojson-scalars", "{{ 'a string'|tojson }}|{{ 3|tojson }}|{{ nv|tojson }}|{{ 'tab\\tnl\\n'|tojson }}", {"nv": None}),
    ("tojson-tool", "{{ tl[0]|tojson }}", {"tl": [{"type": "function", "function": {"name": "f", "description": None, "parameters": {"type": "object", "properties": {"n": {"type": "number", "minimum": 0.0, "maximum": 100.5}}}}}]}),
    # Globals.
    ("raise-exception", "{% if r != 'user' %}{{ raise_exception('bad role: ' ~ r) }}{% endif %}ok", {"r": "x"}),
    ("raise-exception-in-loop", "{% for m in messages %}{% if m.role == 'assistant' %}{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}{% endfor %}", {}),
    ("strftime-now", "{{ strftime_now('%d %b %Y') }}|{{ strftime_now('%Y-%m-%dT%H:%M:%S') }}|{{ strftime_now('%A %B %-d %j %I%p %y %a %e') }}|{{ strftime_now('%H:%M:%S.%f%z%Z') }}", {}),
    ("variables-named-like-filters", "{{ format }}|{{ '%s'|format(join) }}|{{ ['a', 'b']|join('-') }}|{{ tojson }}", {"format": "F", "join": "J", "tojson": 1}),
    ("fixed-variables", "{{ tools is none }}|{{ documents is none }}|{{ add_generation_prompt }}|{{ messages|length }}|{{ bos_token is defined }}", {}),
]

# Templates in the style of widely used models' chat templates (written for
# these vectors, not copied), to exercise their constructs together.
LLAMA_LIKE = """{{- bos_token }}
{%- if custom_tools is defined %}
    {%- set tools = custom_tools %}
{%- endif %}
{%- if not tools_in_user_message is defined %}
    {%- set tools_in_user_message = true %}
{%- endif %}
{%- if not date_string is defined %}
    {%- set date_string = strftime_now("%d %b %Y") %}
{%- endif %}
{%- if not tools is defined %}
    {%- set tools = none %}
{%- endif %}
{%- if messages[0]['role'] == 'system' %}
    {%- set system_message = messages[0]['content']|trim %}
    {%- set messages = messages[1:] %}
{%- else %}
    {%- set system_message = "" %}
{%- endif %}
{{- "<|start_header_id|>system<|end_header_id|>\\n\\n" }}
{%- if tools is not none %}
    {{- "Environment: ipython\\n" }}
{%- endif %}
{{- "Cutting Knowledge Date: December 2023\\n" }}
{{- "Today Date: " + date_string + "\\n\\n" }}
{%- if tools is not none and not tools_in_user_message %}
    {{- "You have access to the following functions.\\n\\n" }}
    {%- for t in tools %}
        {{- t | tojson(indent=4) }}
        {{- "\\n\\n" }}
    {%- endfor %}
{%- endif %}
{{- system_message }}
{{- "<|eot_id|>" }}
{%- if tools_in_user_message and not tools is none %}
    {%- if messages | length != 0 %}
        {%- set first_user_message = messages[0]['content']|trim %}
        {%- set messages = messages[1:] %}
    {%- else %}
        {{- raise_exception("Cannot put tools in the first user message when there's no first user message!") }}
    {%- endif %}
    {{- '<|start_header_id|>user<|end_header_id|>\\n\\n' -}}
    {{- "Given the following functions, please respond with a JSON for a function call " }}
    {%- for t in tools %}
        {{- t | tojson(indent=4) }}
        {{- "\\n\\n" }}
    {%- endfor %}
    {{- first_user_message + "<|eot_id|>"}}
{%- endif %}
{%- for message in messages %}
    {%- if not (message.role == 'ipython' or message.role == 'tool' or 'tool_calls' in message) %}
        {{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'+ message['content'] | trim + '<|eot_id|>' }}
    {%- elif 'tool_calls' in message %}
        {%- if not message.tool_calls|length == 1 %}
            {{- raise_exception("This model only supports single tool-calls at once!") }}
        {%- endif %}
        {%- set tool_call = message.tool_calls[0].function %}
        {{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' -}}
        {{- '{"name": "' + tool_call.name + '", ' }}
        {{- '"parameters": ' }}
        {{- tool_call.arguments | tojson }}
        {{- "}" }}
        {{- "<|eot_id|>" }}
    {%- elif message.role == "tool" or message.role == "ipython" %}
        {{- "<|start_header_id|>ipython<|end_header_id|>\\n\\n" }}
        {%- if message.content is mapping or message.content is iterable %}
            {{- message.content | tojson }}
        {%- else %}
            {{- message.content }}
        {%- endif %}
        {{- "<|eot_id|>" }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}
{%- endif %}
"""

MISTRAL_LIKE = """{%- if messages[0]['role'] == 'system' %}
    {%- set system_message = messages[0]['content'] %}
    {%- set loop_messages = messages[1:] %}
{%- else %}
    {%- set loop_messages = messages %}
{%- endif %}
{{- bos_token }}
{%- for message in loop_messages %}
    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}
        {{- raise_exception('After the optional system message, conversation roles must alternate user/assistant/user/assistant/...') }}
    {%- endif %}
    {%- if message['role'] == 'user' %}
        {%- if loop.first and system_message is defined %}
            {{- ' [INST] ' + system_message + '\\n\\n' + message['content'] + ' [/INST]' }}
        {%- else %}
            {{- ' [INST] ' + message['content'] + ' [/INST]' }}
        {%- endif %}
    {%- elif message['role'] == 'assistant' %}
        {{- ' ' + message['content'] + eos_token}}
    {%- else %}
        {{- raise_exception('Only user and assistant roles are supported, with the exception of an initial optional system message!') }}
    {%- endif %}
{%- endfor %}
"""

GEMMA_LIKE = """{{ bos_token }}{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role not supported') }}{% endif %}{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}{% if (message['role'] == 'assistant') %}{% set role = 'model' %}{% else %}{% set role = message['role'] %}{% endif %}{{ '<start_of_turn>' + role + '\\n' + message['content'] | trim + '<end_of_turn>\\n' }}{% endfor %}{% if add_generation_prompt %}{{'<start_of_turn>model\\n'}}{% endif %}"""

TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Current weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer", "minimum": 1, "default": 1.0}}, "required": ["city"]}}}]
SYS = {"role": "system", "content": "  Be brief.  "}
U1 = {"role": "user", "content": "Hi there "}
A1 = {"role": "assistant", "content": " Hello! "}
U2 = {"role": "user", "content": "Weather in Bern?"}
CALL = {"role": "assistant", "content": "", "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Bern", "days": 2}}}]}
RES = {"role": "tool", "content": "{\"temp\": 3}", "tool_call_id": "c1"}

CASES += [
    ("llama-like-chat", LLAMA_LIKE, {"messages": [SYS, U1, A1, U2], "bos_token": "<|begin_of_text|>"}),
    ("llama-like-tools-in-user", LLAMA_LIKE, {"messages": [SYS, U2, CALL, RES], "tools": TOOLS, "bos_token": "<|begin_of_text|>"}),
    ("llama-like-tools-in-system", LLAMA_LIKE, {"messages": [U2], "tools": TOOLS, "tools_in_user_message": False, "date_string": "26 Jul 2024", "bos_token": "<|begin_of_text|>"}),
    ("llama-like-no-first-user", LLAMA_LIKE, {"messages": [SYS], "tools": TOOLS, "bos_token": "<|begin_of_text|>"}),
    ("mistral-like-chat", MISTRAL_LIKE, {"messages": [SYS, U1, A1, U2], "bos_token": "<s>", "eos_token": "</s>"}),
    ("mistral-like-alternation", MISTRAL_LIKE, {"messages": [U1, U2], "bos_token": "<s>", "eos_token": "</s>"}),
    ("gemma-like-chat", GEMMA_LIKE, {"messages": [U1, A1, U2], "bos_token": "<bos>"}),
    ("gemma-like-system", GEMMA_LIKE, {"messages": [SYS, U1], "bos_token": "<bos>"}),
]

out = []
for name, template, variables in CASES:
    context = dict(messages=MSGS, tools=None, documents=None, add_generation_prompt=True)
    context.update(variables)
    case = {"name": name, "template": template, "vars": variables}
    try:
        case["rendered"] = env.from_string(template).render(**context)
    except jinja2.exceptions.TemplateError as e:
        if type(e) is not jinja2.exceptions.TemplateError:
            raise
        case["error"] = e.message
    out.append(case)

with open("jinja2_semantics.json", "w", encoding="utf-8") as f:
    json.dump({"generator": "Jinja2 %s, %s" % (jinja2.__version__, __doc__.splitlines()[0]),
               "strftime_now_clock": CLOCK.isoformat(), "messages": MSGS, "cases": out},
              f, ensure_ascii=False, indent=1)
    f.write("\n")
