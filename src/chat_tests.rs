use super::*;

fn chatml() -> ChatTemplate {
    ChatTemplate::new(CHATML_TEMPLATE, "", "<|im_end|>").unwrap()
}

fn render_str(source: &str, messages: &[ChatMessage]) -> Result<String, ChatError> {
    ChatTemplate::new(source, "<s>", "</s>")?.render(messages, false, None)
}

#[test]
fn chatml_renders_system_and_turns_with_generation_prompt() {
    let msgs = [
        ChatMessage::system("You are helpful."),
        ChatMessage::user("Hi"),
        ChatMessage::assistant("Hello!"),
        ChatMessage::user("How are you?"),
    ];
    assert_eq!(
        chatml().render(&msgs, true, None).unwrap(),
        "<|im_start|>system\nYou are helpful.<|im_end|>\n\
         <|im_start|>user\nHi<|im_end|>\n\
         <|im_start|>assistant\nHello!<|im_end|>\n\
         <|im_start|>user\nHow are you?<|im_end|>\n\
         <|im_start|>assistant\n"
    );
}

#[test]
fn chatml_without_generation_prompt_ends_after_the_last_turn() {
    assert_eq!(
        chatml()
            .render(&[ChatMessage::user("Hi")], false, None)
            .unwrap(),
        "<|im_start|>user\nHi<|im_end|>\n"
    );
}

#[test]
fn chatml_puts_reasoning_of_the_current_turn_in_a_think_block() {
    let msgs = [
        ChatMessage::user("2+2?"),
        ChatMessage::assistant("4").with_reasoning("\nAdd them.\n"),
    ];
    assert_eq!(
        chatml().render(&msgs, false, None).unwrap(),
        "<|im_start|>user\n2+2?<|im_end|>\n\
         <|im_start|>assistant\n<think>\nAdd them.\n</think>\n\n4<|im_end|>\n"
    );
}

#[test]
fn chatml_drops_reasoning_of_turns_before_the_last_user_message() {
    let msgs = [
        ChatMessage::user("a"),
        ChatMessage::assistant("b").with_reasoning("r1"),
        ChatMessage::user("c"),
    ];
    assert_eq!(
        chatml().render(&msgs, false, None).unwrap(),
        "<|im_start|>user\na<|im_end|>\n\
         <|im_start|>assistant\nb<|im_end|>\n\
         <|im_start|>user\nc<|im_end|>\n"
    );
}

#[test]
fn chatml_disabled_thinking_emits_an_empty_think_block() {
    let msgs = [ChatMessage::user("Hi")];
    let t = chatml();
    assert_eq!(
        t.render(&msgs, true, Some(false)).unwrap(),
        "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
    );
    for thinking in [None, Some(true)] {
        assert_eq!(
            t.render(&msgs, true, thinking).unwrap(),
            "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
        );
    }
}

#[test]
fn syntax_errors_are_errors_not_panics() {
    for bad in [
        "{% if %}x{% endif %}",
        "{% for m in messages %}no end",
        "{{ messages[ }}",
    ] {
        assert!(
            matches!(ChatTemplate::new(bad, "", ""), Err(ChatError::Syntax(_))),
            "{bad:?}"
        );
    }
}

#[test]
fn raise_exception_carries_its_message() {
    let src = "{% for m in messages %}{% if m.role not in ['user', 'assistant'] %}\
               {{ raise_exception('Only user and assistant roles are supported!') }}\
               {% endif %}{{ m.content }}{% endfor %}";
    assert_eq!(render_str(src, &[ChatMessage::user("ok")]).unwrap(), "ok");
    let err = render_str(src, &[ChatMessage::system("no")]).unwrap_err();
    assert!(matches!(err, ChatError::Render(_)));
    assert!(
        err.to_string()
            .contains("Only user and assistant roles are supported!"),
        "{err}"
    );
}

#[test]
fn bos_and_eos_tokens_are_globals() {
    let src = "{{ bos_token }}{% for m in messages %}{{ m.content }}{% endfor %}{{ eos_token }}";
    assert_eq!(
        render_str(src, &[ChatMessage::user("Hi")]).unwrap(),
        "<s>Hi</s>"
    );
}

#[test]
fn block_lines_are_trimmed_like_hugging_face_jinja() {
    // trim_blocks eats the newline after a block tag; lstrip_blocks the indentation before it.
    let src = "{% for m in messages %}\n    {% if true %}\n{{ m.content }}\n    {% endif %}\n{% endfor %}";
    assert_eq!(
        render_str(src, &[ChatMessage::user("Hi"), ChatMessage::user("Yo")]).unwrap(),
        "Hi\nYo\n"
    );
}

/// Written in the style of the Qwen3 templates: reverse scan with a namespace, Python string
/// methods, `is string`, `in`, `loop.last`, `loop.index0`, and reassigning a variable inside
/// an `if` within a loop.
const QWEN_STYLE: &str = r#"{%- set ns = namespace(multi_step_tool=true, last_query_index=messages|length - 1) %}
{%- for message in messages[::-1] %}
    {%- set index = (messages|length - 1) - loop.index0 %}
    {%- if ns.multi_step_tool and message.role == "user" and not(message.content.startswith('<tool_response>') and message.content.endswith('</tool_response>')) %}
        {%- set ns.multi_step_tool = false %}
        {%- set ns.last_query_index = index %}
    {%- endif %}
{%- endfor %}
{%- for message in messages %}
    {%- set content = message.content %}
    {%- if message.role == "assistant" %}
        {%- set reasoning_content = '' %}
        {%- if message.reasoning_content is string %}
            {%- set reasoning_content = message.reasoning_content %}
        {%- elif '</think>' in content %}
            {%- set reasoning_content = content.split('</think>')[0].rstrip('\n').split('<think>')[-1].lstrip('\n') %}
            {%- set content = content.split('</think>')[-1].lstrip('\n') %}
        {%- endif %}
        {%- if loop.index0 > ns.last_query_index and (loop.last or reasoning_content) %}
            {{- '<|im_start|>' + message.role + '\n<think>\n' + reasoning_content.strip('\n') + '\n</think>\n\n' + content.lstrip('\n') }}
        {%- else %}
            {{- '<|im_start|>' + message.role + '\n' + content }}
        {%- endif %}
        {{- '<|im_end|>\n' }}
    {%- else %}
        {{- '<|im_start|>' + message.role + '\n' + content + '<|im_end|>\n' }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\n' }}
    {%- if enable_thinking is defined and enable_thinking is false %}
        {{- '<think>\n\n</think>\n\n' }}
    {%- endif %}
{%- endif %}
"#;

#[test]
fn qwen_style_template_constructs_render_as_jinja2_would() {
    let msgs = [
        ChatMessage::system("S"),
        ChatMessage::user("Q1"),
        ChatMessage::assistant("<think>\nold thought\n</think>\n\nA1"),
        ChatMessage::user("Q2"),
        ChatMessage::assistant("A2").with_reasoning("new thought"),
        ChatMessage::user("<tool_response>r</tool_response>"),
    ];
    let t = ChatTemplate::new(QWEN_STYLE, "", "<|im_end|>").unwrap();
    // The last real query is index 3 (index 5 is a tool response); message 2's inline
    // reasoning is split off and dropped, message 4's is kept.
    assert_eq!(
        t.render(&msgs, true, None).unwrap(),
        "<|im_start|>system\nS<|im_end|>\n\
         <|im_start|>user\nQ1<|im_end|>\n\
         <|im_start|>assistant\nA1<|im_end|>\n\
         <|im_start|>user\nQ2<|im_end|>\n\
         <|im_start|>assistant\n<think>\nnew thought\n</think>\n\nA2<|im_end|>\n\
         <|im_start|>user\n<tool_response>r</tool_response><|im_end|>\n\
         <|im_start|>assistant\n"
    );
    assert!(t
        .render(&msgs, true, Some(false))
        .unwrap()
        .ends_with("<|im_start|>assistant\n<think>\n\n</think>\n\n"));
}

#[test]
fn tojson_matches_python_json_dumps() {
    let m = [ChatMessage::user("Hi")];
    assert_eq!(
        render_str(
            r#"{{ {"name": "get_weather", "args": [1, 2.5, true, none, "é\"\n"], "n": 3.0} | tojson }}"#,
            &m
        )
        .unwrap(),
        r#"{"name": "get_weather", "args": [1, 2.5, true, null, "é\"\n"], "n": 3.0}"#
    );
    assert_eq!(
        render_str("{{ messages[0] | tojson }}", &m).unwrap(),
        r#"{"role": "user", "content": "Hi"}"#
    );
    assert_eq!(
        render_str(
            r#"{{ {"a": 1, "b": [2], "c": {}} | tojson(indent=2) }}"#,
            &m
        )
        .unwrap(),
        "{\n  \"a\": 1,\n  \"b\": [\n    2\n  ],\n  \"c\": {}\n}"
    );
    assert_eq!(
        render_str(r#"{{ {"b": 1, "a": 2} | tojson(sort_keys=true) }}"#, &m).unwrap(),
        r#"{"a": 2, "b": 1}"#
    );
    assert_eq!(
        render_str(
            "{{ messages[0].content | tojson(ensure_ascii=true) }}",
            &[ChatMessage::user("é😀\u{1}\t")]
        )
        .unwrap(),
        r#""\u00e9\ud83d\ude00\u0001\t""#
    );
    assert_eq!(
        render_str(r#"{{ [1, [2]] | tojson(separators=[",", ":"]) }}"#, &m).unwrap(),
        "[1,[2]]"
    );
}

#[test]
fn python_string_methods_work_through_pycompat() {
    let m = [ChatMessage::user("  Hello World  ")];
    let src = "{% set c = messages[0].content %}{{ c.strip() }}|{% if c.strip().startswith('Hello') %}yes{% endif %}|\
               {{ c.split() | join(',') }}|{{ c.lstrip() }}|{{ c.rstrip() }}|{{ c.strip().upper() }}";
    assert_eq!(
        render_str(src, &m).unwrap(),
        "Hello World|yes|Hello,World|Hello World  |  Hello World|HELLO WORLD"
    );
}

#[test]
fn templates_and_samplers_can_move_to_a_worker_thread() {
    fn shared<T: Send + Sync>() {}
    shared::<ChatTemplate>();
    shared::<crate::sample::Sampler>();
}

/// Renders `source` over one short message and returns the error text, checking that the
/// failure is a limit and that it came quickly.
fn limit_error(source: &str) -> String {
    let t0 = std::time::Instant::now();
    let err = render_str(source, &[ChatMessage::user("Hi")]).unwrap_err();
    let secs = t0.elapsed().as_secs_f64();
    assert!(matches!(err, ChatError::Limit(_)), "{err}");
    assert!(secs < 20.0, "took {secs:.1} s to fail");
    let text = err.to_string();
    assert!(
        text.starts_with("the model's chat template exceeded"),
        "{text}"
    );
    assert!(!text.contains('\n'), "{text}");
    text
}

#[test]
fn a_template_that_loops_a_billion_times_fails_instead_of_hanging() {
    let text = limit_error(
        "{% for i in range(100000) %}{% for j in range(100000) %}{% set x = j %}{% endfor %}{% endfor %}",
    );
    assert!(text.contains("work limit"), "{text}");
}

#[test]
fn a_template_asking_for_a_billion_element_range_fails_with_one_line() {
    let err = render_str(
        "{% for i in range(999999999) %}x{% endfor %}",
        &[ChatMessage::user("Hi")],
    )
    .unwrap_err();
    assert!(err.to_string().contains("range"), "{err}");
}

#[test]
fn a_template_doubling_a_string_thirty_times_fails_before_allocating_a_gigabyte() {
    let source = format!(
        "{{% set s = 'ab' %}}{}{{{{ s }}}}",
        "{% set s = s ~ s %}".repeat(30)
    );
    let text = limit_error(&source);
    assert!(text.contains("work limit"), "{text}");
}

#[test]
fn a_template_doubling_a_string_in_a_loop_fails_before_allocating_a_gigabyte() {
    let text = limit_error(
        "{% set ns = namespace(s='ab') %}{% for i in range(40) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s|length }}",
    );
    assert!(text.contains("work limit"), "{text}");
}

#[test]
fn a_macro_that_calls_itself_twice_fails_instead_of_running_exponentially() {
    let text = limit_error(
        "{% macro f(n) %}{% if n > 0 %}{{ f(n - 1) }}{{ f(n - 1) }}{% else %}x{% endif %}{% endmacro %}{{ f(60) }}",
    );
    assert!(text.contains("limit"), "{text}");
}

#[test]
fn a_macro_that_recurses_forever_fails_at_the_nesting_limit_without_overflowing_the_stack() {
    let text = limit_error("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}");
    assert!(text.contains("nesting limit"), "{text}");
}

#[test]
fn a_recursive_loop_over_a_self_nesting_namespace_fails_at_the_nesting_limit() {
    let text = limit_error(
        "{% set ns = namespace(children=[]) %}{% set ns.children = [ns] %}\
         {% for n in [ns] recursive %}{{ loop(n.children) }}{% endfor %}",
    );
    assert!(text.contains("limit"), "{text}");
}

#[test]
fn deeply_nested_template_source_is_refused_at_compile_time() {
    let source = format!("{{{{ {}1{} }}}}", "(".repeat(5000), ")".repeat(5000));
    let err = ChatTemplate::new(&source, "", "").unwrap_err();
    assert!(matches!(err, ChatError::Limit(_)), "{err}");
    assert!(!err.to_string().contains('\n'));
}

#[test]
fn a_template_printing_past_the_output_limit_fails() {
    let text = limit_error("{% for i in range(100000) %}{{ 'y' * 100 }}{% endfor %}");
    assert!(text.contains("output limit"), "{text}");
}

#[test]
fn tojson_of_a_value_nested_past_its_depth_limit_fails_instead_of_overflowing_the_stack() {
    let source = format!(
        "{{% set x = 1 %}}{}{{{{ x | tojson }}}}",
        "{% set x = [[[[x]]]] %}".repeat(50)
    );
    let err = render_str(&source, &[ChatMessage::user("Hi")]).unwrap_err();
    assert!(err.to_string().contains("nests deeper"), "{err}");
}

#[test]
fn tojson_of_one_long_string_listed_many_times_runs_out_of_fuel() {
    let text =
        limit_error("{% set s = 'x' * 1000000 %}{% set l = [s] * 5000 %}{{ (l|tojson)|length }}");
    assert!(text.contains("work limit"), "{text}");
}

#[test]
fn tojson_refuses_a_huge_indent_before_allocating_it() {
    let err = render_str(
        "{{ [1]|tojson(indent=1000000000000) }}",
        &[ChatMessage::user("Hi")],
    )
    .unwrap_err();
    assert!(err.to_string().contains("indent"), "{err}");
}

/// A long chat the way `clover chat` builds one: a system prompt, then 200 rounds of a user
/// question, an assistant answer with reasoning, and tool responses, 1.2 MB in all.
fn long_conversation() -> Vec<ChatMessage> {
    let para = "The quick brown fox jumps over the lazy dog; \"quoted\" text, numbers 12345, \
                and unicode é😀. "
        .repeat(20);
    let mut msgs = vec![ChatMessage::system(format!("You are helpful. {para}"))];
    for i in 0..200 {
        msgs.push(ChatMessage::user(format!("Question {i}: {para}")));
        msgs.push(
            ChatMessage::assistant(format!("Answer {i}: {para}"))
                .with_reasoning(format!("Thinking about {i}: {para}")),
        );
        msgs.push(ChatMessage::new(
            "tool",
            format!("<tool_response>{{\"result\": \"{para}\"}}</tool_response>"),
        ));
    }
    msgs
}

#[test]
fn a_long_conversation_uses_a_small_share_of_the_fuel() {
    let msgs = long_conversation();
    let bytes: usize = msgs.iter().map(|m| m.content.len()).sum();
    assert!(bytes > 1_000_000, "{bytes}");
    for (name, source) in [
        ("chatml", CHATML_TEMPLATE),
        ("qwen-style", QWEN_STYLE),
        (
            "default model",
            "{%- for message in messages -%}\
             {{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' -}}\
             {%- endfor -%}\
             {%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}",
        ),
    ] {
        let t = ChatTemplate::new(source, "", "<|im_end|>").unwrap();
        let (text, fuel) = t.render_measured(&msgs, true, Some(true)).unwrap();
        eprintln!(
            "{name}: {} messages, {bytes} bytes in, {} bytes out, {fuel} fuel ({:.2} % of {FUEL})",
            msgs.len(),
            text.len(),
            fuel as f64 * 100.0 / FUEL as f64
        );
        assert!(fuel > 0);
        assert!(fuel < FUEL / 20, "{name} used {fuel} fuel");
    }
}

#[test]
fn a_namespace_that_holds_itself_is_refused_instead_of_overflowing_the_stack() {
    let text = limit_error("{% set ns = namespace() %}{% set ns.me = ns %}{{ ns }}");
    assert!(text.contains("nesting limit"), "{text}");
}

#[test]
fn two_namespaces_that_hold_each_other_are_refused_instead_of_overflowing_the_stack() {
    let text = limit_error(
        "{% set a = namespace() %}{% set b = namespace() %}{% set a.b = b %}\
         {% set b.a = [a] %}{{ a }}{{ a == b }}",
    );
    assert!(text.contains("nesting limit"), "{text}");
}

#[test]
fn a_list_nested_a_hundred_thousand_deep_by_a_loop_is_refused() {
    let text = limit_error(
        "{% set ns = namespace(l=[]) %}{% for i in range(100000) %}{% set ns.l = [ns.l] %}\
         {% endfor %}{{ ns.l }}",
    );
    assert!(text.contains("nesting limit"), "{text}");
}

#[test]
fn namespace_assignments_keep_their_meaning_under_the_nesting_guard() {
    let source = "{% set ns = namespace(a=1, d={}) %}{% set ns.a = ns.a + 1 -%}  \
                  {%- set ns.s = \"x %} y\" ~ 'q\\'s' %}\
                  {%- set  ns . d  = {\"k\": [1, {\"m\": messages[0]}]} %}\
                  {{ ns.a }}|{{ ns.s }}|{{ ns.d.k[1].m.role }}|{% set ns2 = namespace(x=ns.a) %}{{ ns2.x }}";
    assert_eq!(
        render_str(source, &[ChatMessage::user("Hi")]).unwrap(),
        "2|x %} yq's|user|2"
    );
}

#[test]
fn a_namespace_assignment_with_multibyte_text_is_rewritten_without_slicing_inside_a_char() {
    // Outside quotes the scan walks bytes of `é`; inside quotes it skips them.
    assert!(matches!(
        ChatTemplate::new("{% set ns.a = é %}", "", ""),
        Err(ChatError::Syntax(_))
    ));
    assert_eq!(
        render_str(
            "{% set ns = namespace() %}{% set ns.a = 'é😀' ~ \"ü\" -%} {{ ns.a }}",
            &[ChatMessage::user("Hi")]
        )
        .unwrap(),
        "é😀ü"
    );
}
