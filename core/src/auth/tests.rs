//! Token and authorizer tests against independent re-implementations of the SDKs' encoders,
//! and golden tokens computed with Python's standard library.

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use hmac::Mac;

use super::token::HmacSha256;
use super::*;
use crate::types::Timestamp;

const KEY: &str = "SAS_KEY_VALUE";
const ROOT: &str = "RootManageSharedAccessKey";
/// 2025-01-01T00:00:00Z.
const SE: i64 = 1_735_689_600;

fn at_seconds(seconds: i64) -> Timestamp {
    Timestamp::from_millis(seconds * 1000)
}

/// One second before `SE`.
fn before_expiry() -> Timestamp {
    at_seconds(SE - 1)
}

fn authorizer() -> Authorizer {
    Authorizer::new(vec![
        SasPolicy::new(ROOT, KEY, Rights::MANAGE),
        SasPolicy::new("sender", "send-key", Rights::SEND),
        SasPolicy::new("listener", "listen-key", Rights::LISTEN),
        SasPolicy::new("send.listen", "send-listen-key", Rights::SEND.with(Right::Listen)),
    ])
    .expect("valid policies")
}

// ---- Independent re-implementations of the SDKs' encoders and token layouts. ----

/// Python `urllib.parse.quote_plus` (safe: alphanumerics and `_.-~`; space → `+`).
fn quote_plus(text: &str) -> String {
    encode_with(text, |b| b.is_ascii_alphanumeric() || b"_.-~".contains(&b), true)
}

/// JS `encodeURIComponent` (safe: alphanumerics and `-_.!~*'()`).
fn encode_uri_component(text: &str) -> String {
    encode_with(text, |b| b.is_ascii_alphanumeric() || b"-_.!~*'()".contains(&b), false)
}

/// Rust `form_urlencoded` (safe: alphanumerics and `*-._`; space → `+`).
fn form_urlencode(text: &str) -> String {
    encode_with(text, |b| b.is_ascii_alphanumeric() || b"*-._".contains(&b), true)
}

fn encode_with(text: &str, safe: impl Fn(u8) -> bool, space_as_plus: bool) -> String {
    let mut out = String::new();
    for b in text.bytes() {
        if safe(b) {
            out.push(char::from(b));
        } else if b == b' ' && space_as_plus {
            out.push('+');
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

fn signature(key: &str, signed: &str) -> String {
    let mut mac = HmacSha256::new_from_slice(key.as_bytes()).unwrap();
    mac.update(signed.as_bytes());
    STANDARD.encode(mac.finalize().into_bytes())
}

/// A token whose `sr` text is `raw_sr` (already encoded), with parameters in `order`.
fn token_in_order(
    order: &[&str],
    raw_sr: &str,
    encode: fn(&str) -> String,
    policy: &str,
    key: &str,
    se: i64,
) -> String {
    let sig = encode(&signature(key, &format!("{raw_sr}\n{se}")));
    let parts: Vec<String> = order
        .iter()
        .map(|&name| match name {
            "sr" => format!("sr={raw_sr}"),
            "sig" => format!("sig={sig}"),
            "se" => format!("se={se}"),
            "skn" => format!("skn={}", encode(policy)),
            other => other.to_owned(),
        })
        .collect();
    format!("SharedAccessSignature {}", parts.join("&"))
}

const PY_ORDER: &[&str] = &["sr", "sig", "se", "skn"];
const RS_ORDER: &[&str] = &["sig", "se", "skn", "sr"];

/// `azure-servicebus` (pyamqp `generate_sas_token`): quote_plus, order sr, sig, se, skn.
fn python_token(audience: &str, policy: &str, key: &str, se: i64) -> String {
    token_in_order(PY_ORDER, &quote_plus(audience), quote_plus, policy, key, se)
}

/// `@azure/core-amqp` token provider: encodeURIComponent, order sr, sig, se, skn.
fn js_token(audience: &str, policy: &str, key: &str, se: i64) -> String {
    token_in_order(PY_ORDER, &encode_uri_component(audience), encode_uri_component, policy, key, se)
}

/// The Rust SDK: form_urlencoded, order sig, se, skn, sr.
fn rust_token(audience: &str, policy: &str, key: &str, se: i64) -> String {
    token_in_order(RS_ORDER, &form_urlencode(audience), form_urlencode, policy, key, se)
}

/// JS admin client: the encoded audience lower-cased (`%3a%2f`), order sig, se, skn, sr.
fn js_admin_token(audience: &str, policy: &str, key: &str, se: i64) -> String {
    let raw_sr = encode_uri_component(&audience.to_lowercase()).to_lowercase();
    token_in_order(RS_ORDER, &raw_sr, encode_uri_component, policy, key, se)
}

// ---- Golden tokens, computed with python3's stdlib (hmac, hashlib, base64,
// urllib.parse.quote_plus / urlencode), exactly like pyamqp's generate_sas_token:
//   enc = quote_plus(aud)
//   sig = b64encode(hmac.new(key.encode(), f"{enc}\n{se}".encode(), sha256).digest())
//   "SharedAccessSignature " + urlencode({"sr": aud, "sig": sig, "se": str(se), "skn": name})
// with key = "SAS_KEY_VALUE", name = "RootManageSharedAccessKey", se = 1735689600. ----

const GOLDEN: &[(&str, &str)] = &[
    (
        "sb://localhost:5672/q",
        "SharedAccessSignature sr=sb%3A%2F%2Flocalhost%3A5672%2Fq\
         &sig=Vh75mS2naQbCpCSVVVuDGd5uwj6L00geDnoAgXYZRt4%3D&se=1735689600\
         &skn=RootManageSharedAccessKey",
    ),
    (
        "sb://localhost/orders/Subscriptions/audit",
        "SharedAccessSignature sr=sb%3A%2F%2Flocalhost%2Forders%2FSubscriptions%2Faudit\
         &sig=fCh3rhn4Ru4o%2FT9eHZqTHTt7kc39e0oTgBpF8I%2BBNWA%3D&se=1735689600\
         &skn=RootManageSharedAccessKey",
    ),
];

#[test]
fn golden_python_tokens_verify() {
    let auth = Authorizer::development();
    for &(audience, token) in GOLDEN {
        let claim = auth.verify_token(token, before_expiry()).expect(audience);
        assert_eq!(claim.audience, Audience::from_uri(audience));
        assert_eq!(claim.rights, Rights::MANAGE);
        assert_eq!(claim.expires_at, at_seconds(SE));
        assert_eq!(claim.policy, ROOT);
    }
}

#[test]
fn a_signature_sent_unescaped_keeps_its_plus() {
    // The second golden signature holds a `+` and a `/` (`%2B`, `%2F`); sent raw, the `+` must
    // stay a `+` (never a space) for the signature to verify.
    let (audience, token) = GOLDEN[1];
    let escaped = "fCh3rhn4Ru4o%2FT9eHZqTHTt7kc39e0oTgBpF8I%2BBNWA%3D";
    assert!(token.contains(escaped));
    let raw = token.replace(escaped, "fCh3rhn4Ru4o/T9eHZqTHTt7kc39e0oTgBpF8I+BNWA=");
    let claim = Authorizer::development().verify_token(&raw, before_expiry()).expect(audience);
    assert_eq!(claim.audience, Audience::from_uri(audience));
}

#[test]
fn generate_token_matches_python_byte_for_byte() {
    for &(audience, token) in GOLDEN {
        assert_eq!(generate_token(audience, ROOT, KEY, at_seconds(SE)), token);
    }
}

#[test]
fn generate_token_rounds_expiry_down_to_seconds() {
    let token = generate_token("sb://h/q", ROOT, KEY, Timestamp::from_millis(SE * 1000 + 999));
    assert!(token.contains(&format!("&se={SE}&")), "{token}");
    let claim = Authorizer::development().verify_token(&token, before_expiry()).unwrap();
    assert_eq!(claim.expires_at, at_seconds(SE));
}

#[test]
fn generated_tokens_verify_for_every_policy() {
    let auth = authorizer();
    for (policy, key, rights) in [
        (ROOT, KEY, Rights::MANAGE),
        ("sender", "send-key", Rights::SEND),
        ("send.listen", "send-listen-key", Rights::SEND.with(Right::Listen)),
    ] {
        let token = generate_token("amqps://Host:5671/q/$management", policy, key, at_seconds(SE));
        let claim = auth.verify_token(&token, before_expiry()).expect(policy);
        assert_eq!(claim.audience.as_str(), "q/$management");
        assert_eq!(claim.rights, rights);
        assert_eq!(claim.policy, policy);
    }
}

#[test]
fn every_sdk_encoding_and_parameter_order_verifies() {
    let auth = authorizer();
    type Maker = fn(&str, &str, &str, i64) -> String;
    let cases: &[(&str, Maker, &str, &str)] = &[
        ("python", python_token, "sb://localhost:5672/q", "q"),
        ("js", js_token, "sb://localhost/q", "q"),
        (
            "js, subscription dlq",
            js_token,
            "sb://localhost/t/Subscriptions/s/$DeadLetterQueue",
            "t/subscriptions/s/$deadletterqueue",
        ),
        ("rust", rust_token, "amqps://ns.servicebus.windows.net/q/$management", "q/$management"),
        (
            "rust, http url with query",
            rust_token,
            "https://ns.servicebus.windows.net/q1/messages/head?timeout=5",
            "q1/messages/head",
        ),
        (
            "js admin, lower-cased",
            js_admin_token,
            "https://localhost:18445/$Resources/Queues?api-version=2021-05",
            "$resources/queues",
        ),
        ("python admin, namespace root", python_token, "https://localhost:5300", ""),
        ("python, sb namespace", python_token, "sb://ns/", ""),
        ("python, ~ and dotted policy", python_token, "sb://h/q~1", "q~1"),
    ];
    for &(name, make, audience, expected) in cases {
        let (policy, key) =
            if name.contains("dotted") { ("send.listen", "send-listen-key") } else { (ROOT, KEY) };
        let token = make(audience, policy, key, SE);
        let claim = auth
            .verify_token(&token, before_expiry())
            .unwrap_or_else(|e| panic!("{name}: {e} ({token})"));
        assert_eq!(claim.audience.as_str(), expected, "{name}");
        assert_eq!(claim.policy, policy, "{name}");
    }
}

#[test]
fn parameters_are_accepted_in_any_order() {
    let auth = Authorizer::development();
    let raw_sr = quote_plus("sb://localhost:5672/q");
    let orders: &[&[&str]] = &[
        &["sr", "sig", "se", "skn"],
        &["sig", "se", "skn", "sr"],
        &["skn", "se", "sig", "sr"],
        &["se", "sr", "skn", "sig"],
        &["sr", "sig", "se", "skn", ""],
        &["", "sr", "", "sig", "se", "skn"],
        &["sr", "sig", "extra=1", "se", "skn"],
    ];
    for &order in orders {
        let token = token_in_order(order, &raw_sr, quote_plus, ROOT, KEY, SE);
        assert!(auth.verify_token(&token, before_expiry()).is_ok(), "{order:?}: {token}");
    }
}

#[test]
fn expiry_boundary() {
    let auth = Authorizer::development();
    let token = python_token("sb://h/q", ROOT, KEY, SE);
    let cases = [
        (Timestamp::from_millis(0), true),
        (Timestamp::from_millis(SE * 1000 - 1), true),
        (Timestamp::from_millis(SE * 1000), false),
        (Timestamp::from_millis(SE * 1000 + 1), false),
        (at_seconds(SE + 3600), false),
    ];
    for (now, valid) in cases {
        match auth.verify_token(&token, now) {
            Ok(claim) => {
                assert!(valid, "accepted at {now}");
                assert!(claim.authorizes("q", Right::Send, now));
                assert!(!claim.authorizes("q", Right::Send, at_seconds(SE)));
            }
            Err(e) => {
                assert!(!valid, "refused at {now}: {e}");
                assert_eq!(e.kind, AuthErrorKind::Expired, "{e}");
            }
        }
    }
}

#[test]
fn bad_tokens_fail_with_the_right_kind() {
    use AuthErrorKind::*;
    let good = python_token("sb://h/q", ROOT, KEY, SE);
    let good_sig = good.split('&').find_map(|p| p.strip_prefix("sig=")).unwrap().to_owned();
    let truncated_sig = {
        let bytes = STANDARD.decode(percent::decode(&good_sig).unwrap().as_bytes()).unwrap();
        quote_plus(&STANDARD.encode(&bytes[..16]))
    };
    let sr = quote_plus("sb://h/q");
    let with_sig =
        |sig: &str| format!("SharedAccessSignature sr={sr}&sig={sig}&se={SE}&skn={ROOT}");
    let cases: Vec<(&str, String, AuthErrorKind)> = vec![
        ("empty", String::new(), Malformed),
        ("bearer jwt", "Bearer eyJhbGciOiJSUzI1NiJ9.e30.sig".into(), Malformed),
        ("bare jwt", "eyJhbGciOiJSUzI1NiJ9.e30.sig".into(), Malformed),
        (
            "prefix without space",
            good.replacen("SharedAccessSignature ", "SharedAccessSignature", 1),
            Malformed,
        ),
        (
            "lower-case prefix",
            good.replacen("SharedAccessSignature", "sharedaccesssignature", 1),
            Malformed,
        ),
        ("no parameters", "SharedAccessSignature ".into(), Malformed),
        ("missing sr", good.replacen(&format!("sr={sr}&"), "", 1), Malformed),
        ("missing sig", format!("SharedAccessSignature sr={sr}&se={SE}&skn={ROOT}"), Malformed),
        (
            "missing se",
            format!("SharedAccessSignature sr={sr}&sig={good_sig}&skn={ROOT}"),
            Malformed,
        ),
        ("missing skn", format!("SharedAccessSignature sr={sr}&sig={good_sig}&se={SE}"), Malformed),
        ("duplicate sr", format!("{good}&sr={sr}"), Malformed),
        ("duplicate skn", format!("{good}&skn={ROOT}"), Malformed),
        ("part without =", format!("{good}&junk"), Malformed),
        ("se not a number", good.replacen(&format!("se={SE}"), "se=soon", 1), Malformed),
        ("se negative", good.replacen(&format!("se={SE}"), "se=-1", 1), Malformed),
        ("se with plus", good.replacen(&format!("se={SE}"), &format!("se=+{SE}"), 1), Malformed),
        ("se empty", good.replacen(&format!("se={SE}"), "se=", 1), Malformed),
        ("se fractional", good.replacen(&format!("se={SE}"), &format!("se={SE}.5"), 1), Malformed),
        (
            "se overflows",
            good.replacen(&format!("se={SE}"), "se=99999999999999999999", 1),
            Malformed,
        ),
        ("sr bad escape", good.replacen("sr=sb%3A", "sr=sb%3", 1), Malformed),
        ("sr not utf-8", good.replacen("sr=sb", "sr=%FFsb", 1), Malformed),
        ("sig bad escape", with_sig("abc%zz"), Malformed),
        ("sig not base64", with_sig("not*base64"), Malformed),
        ("skn bad escape", good.replacen(&format!("skn={ROOT}"), "skn=%", 1), Malformed),
        ("unknown policy", python_token("sb://h/q", "nobody", KEY, SE), UnknownPolicy),
        (
            "policy name case differs",
            python_token("sb://h/q", "rootmanagesharedaccesskey", KEY, SE),
            UnknownPolicy,
        ),
        ("wrong key", python_token("sb://h/q", ROOT, "other-key", SE), InvalidSignature),
        ("key of another policy", python_token("sb://h/q", "sender", KEY, SE), InvalidSignature),
        (
            "se tampered",
            good.replacen(&format!("se={SE}"), &format!("se={}", SE + 3600), 1),
            InvalidSignature,
        ),
        (
            "se with leading zero",
            good.replacen(&format!("se={SE}"), &format!("se=0{SE}"), 1),
            InvalidSignature,
        ),
        ("sr tampered", good.replacen("%2Fq&", "%2Fq2&", 1), InvalidSignature),
        ("sr re-encoded", good.replacen("sr=sb%3A%2F%2F", "sr=sb%3a%2f%2f", 1), InvalidSignature),
        ("sig truncated", with_sig(&truncated_sig), InvalidSignature),
        ("sig of other text", with_sig(&quote_plus(&signature(KEY, "other"))), InvalidSignature),
        ("sig empty", with_sig(""), InvalidSignature),
        ("expired", python_token("sb://h/q", ROOT, KEY, SE - 1), Expired),
    ];
    let auth = authorizer();
    for (name, token, kind) in cases {
        let error = auth.verify_token(&token, at_seconds(SE - 1)).expect_err(name);
        assert_eq!(error.kind, kind, "{name}: {error} ({token})");
        let message = error.to_string();
        assert!(!message.ends_with('.'), "{name}: {message}");
        assert!(!message.contains(KEY) && !message.contains(&good_sig), "{name}: leaks: {message}");
    }
}

#[test]
fn jwt_tokens_are_refused_with_a_message_saying_so() {
    let error = authorizer().verify_token("Bearer eyJ0eXAi.e30.x", before_expiry()).unwrap_err();
    assert_eq!(error.kind, AuthErrorKind::Malformed);
    assert!(error.message.contains("jwt"), "{error}");
}

#[test]
fn claims_allow_only_their_policy_rights_on_their_audience() {
    use Right::*;
    let auth = authorizer();
    let now = before_expiry();
    let claim = |policy: &str, key: &str, audience: &str| {
        auth.verify_token(&python_token(audience, policy, key, SE), now).unwrap()
    };
    let cases = [
        (claim("sender", "send-key", "sb://h/q"), "q", Send, true),
        (claim("sender", "send-key", "sb://h/q"), "q", Listen, false),
        (claim("sender", "send-key", "sb://h/q"), "q/$management", Manage, false),
        (claim("listener", "listen-key", "sb://h/q"), "q/$DeadLetterQueue", Listen, true),
        (claim("listener", "listen-key", "sb://h/q"), "q", Send, false),
        (claim(ROOT, KEY, "sb://h/q"), "q", Manage, true),
        (claim(ROOT, KEY, "sb://h/q"), "q", Send, true),
        (claim(ROOT, KEY, "sb://h/q"), "q", Listen, true),
        (claim(ROOT, KEY, "sb://h/q"), "q2", Send, false),
        (claim(ROOT, KEY, "sb://h/"), "q2", Send, true),
    ];
    for (claim, path, right, expected) in cases {
        let result = claim.check(path, right, now);
        assert_eq!(result.is_ok(), expected, "{} {path} {right}: {result:?}", claim.policy);
        assert_eq!(claim.authorizes(path, right, now), expected);
        if let Err(error) = result {
            assert_eq!(error.kind, AuthErrorKind::InsufficientRights, "{error}");
        }
    }
    let expired = claim("sender", "send-key", "sb://h/q").check("q", Send, at_seconds(SE));
    assert_eq!(expired.unwrap_err().kind, AuthErrorKind::Expired);
}

#[test]
fn verify_key_checks_name_and_key() {
    use AuthErrorKind::*;
    let auth = authorizer();
    let cases = [
        (ROOT, KEY, Ok(Rights::MANAGE)),
        ("sender", "send-key", Ok(Rights::SEND)),
        ("listener", "listen-key", Ok(Rights::LISTEN)),
        ("send.listen", "send-listen-key", Ok(Rights::SEND.with(Right::Listen))),
        (ROOT, "send-key", Err(InvalidSignature)),
        (ROOT, "SAS_KEY_VALU", Err(InvalidSignature)),
        (ROOT, "SAS_KEY_VALUEX", Err(InvalidSignature)),
        (ROOT, "sas_key_value", Err(InvalidSignature)),
        (ROOT, "", Err(InvalidSignature)),
        ("nobody", KEY, Err(UnknownPolicy)),
        ("", KEY, Err(UnknownPolicy)),
    ];
    for (name, key, expected) in cases {
        let result = auth.verify_key(name, key);
        match (&result, expected) {
            (Ok(claim), Ok(rights)) => {
                assert_eq!(claim.rights, rights, "{name}");
                assert!(claim.audience.is_namespace());
                assert_eq!(claim.expires_at, Timestamp::MAX);
                assert_eq!(claim.policy, name);
                assert_eq!(
                    claim.authorizes("any/entity", Right::Send, at_seconds(SE)),
                    rights.allows(Right::Send)
                );
            }
            (Err(error), Err(kind)) => {
                assert_eq!(error.kind, kind, "{name}/{key}: {error}");
                assert!(!error.to_string().contains(KEY), "{error}");
            }
            _ => panic!("{name}/{key}: got {result:?}, expected {expected:?}"),
        }
    }
}

#[test]
fn authorizer_rejects_bad_policy_sets() {
    let policy = |name: &str, key: &str| SasPolicy::new(name, key, Rights::SEND);
    let cases = [
        (vec![policy("", "k")], Some(PolicyError::EmptyName)),
        (vec![policy("a", "")], Some(PolicyError::EmptyKey { name: "a".into() })),
        (
            vec![policy("a", "k"), policy("a", "k2")],
            Some(PolicyError::Duplicate { name: "a".into() }),
        ),
        (vec![policy("a", "k"), policy("A", "k2")], None),
        (vec![], None),
    ];
    for (policies, expected) in cases {
        assert_eq!(Authorizer::new(policies.clone()).err(), expected, "{policies:?}");
    }
    let empty = Authorizer::new(vec![]).unwrap();
    let error =
        empty.verify_token(&python_token("sb://h/q", ROOT, KEY, SE), before_expiry()).unwrap_err();
    assert_eq!(error.kind, AuthErrorKind::UnknownPolicy);
}

#[test]
fn development_authorizer_uses_the_emulator_key() {
    let dev = Authorizer::development();
    assert!(dev.uses_development_key());
    assert_eq!(
        dev.verify_key(DEVELOPMENT_POLICY_NAME, DEVELOPMENT_KEY).unwrap().rights,
        Rights::MANAGE
    );
    assert!(!authorizer_without_dev_key().uses_development_key());
}

fn authorizer_without_dev_key() -> Authorizer {
    Authorizer::new(vec![SasPolicy::new(ROOT, "a-real-key", Rights::MANAGE)]).unwrap()
}

#[test]
fn debug_output_never_shows_keys() {
    let text = format!("{:?}", authorizer());
    assert!(text.contains("RootManageSharedAccessKey") && text.contains("<redacted>"), "{text}");
    for key in [KEY, "send-key", "listen-key", "send-listen-key"] {
        assert!(!text.contains(key), "{text}");
    }
}

#[test]
fn entity_rules_sign_tokens_for_their_entity_only() {
    use AuthErrorKind::*;
    let auth = authorizer();
    let now = before_expiry();
    let rules = [
        AuthorizationRule::new("q-send", "q-primary", "q-secondary", Rights::SEND),
        AuthorizationRule::new("q-all", "q-manage", "", Rights::MANAGE),
        // Same name as a namespace policy, other key: the rule's key still works.
        AuthorizationRule::new("sender", "rule-key-of-sender", "", Rights::LISTEN),
    ];
    let q = EntityRules { entity: "q", rules: &rules };
    let t_rules = [AuthorizationRule::new("t-listen", "t-key", "", Rights::LISTEN)];
    let t = EntityRules { entity: "t", rules: &t_rules };
    let cases = [
        ("primary key", python_token("sb://h/q", "q-send", "q-primary", SE), q, Ok(Rights::SEND)),
        ("secondary key", js_token("sb://h/q", "q-send", "q-secondary", SE), q, Ok(Rights::SEND)),
        (
            "dead-letter queue",
            python_token("sb://h/q/$DeadLetterQueue", "q-all", "q-manage", SE),
            q,
            Ok(Rights::MANAGE),
        ),
        (
            "management node",
            python_token("amqps://h/q/$management", "q-send", "q-primary", SE),
            q,
            Ok(Rights::SEND),
        ),
        (
            "subscription of the topic",
            python_token("sb://h/t/Subscriptions/s", "t-listen", "t-key", SE),
            t,
            Ok(Rights::LISTEN),
        ),
        (
            "namespace policy first",
            python_token("sb://h/q", "sender", "send-key", SE),
            q,
            Ok(Rights::SEND),
        ),
        (
            "rule sharing a policy's name",
            python_token("sb://h/q", "sender", "rule-key-of-sender", SE),
            q,
            Ok(Rights::LISTEN),
        ),
        (
            "namespace audience",
            python_token("sb://h/", "q-send", "q-primary", SE),
            q,
            Err(InsufficientRights),
        ),
        (
            "another entity",
            python_token("sb://h/q2", "q-send", "q-primary", SE),
            q,
            Err(InsufficientRights),
        ),
        (
            "rules of another entity",
            python_token("sb://h/q", "t-listen", "t-key", SE),
            q,
            Err(UnknownPolicy),
        ),
        ("wrong key", python_token("sb://h/q", "q-send", "q-manage", SE), q, Err(InvalidSignature)),
        (
            "empty secondary is no key",
            python_token("sb://h/q", "q-all", "", SE),
            q,
            Err(InvalidSignature),
        ),
        ("expired", python_token("sb://h/q", "q-send", "q-primary", SE - 1), q, Err(Expired)),
    ];
    for (name, token, entity, expected) in cases {
        let result = auth.verify_token_with(&token, now, Some(entity));
        match (result, expected) {
            (Ok(claim), Ok(rights)) => assert_eq!(claim.rights, rights, "{name}"),
            (Err(error), Err(kind)) => {
                assert_eq!(error.kind, kind, "{name}: {error}");
                assert!(!error.to_string().contains("q-primary"), "{name}: {error}");
            }
            (result, _) => panic!("{name}: got {result:?}, expected {expected:?}"),
        }
    }
    // Without the entity's rules, its keys are unknown.
    let token = python_token("sb://h/q", "q-send", "q-primary", SE);
    assert_eq!(auth.verify_token(&token, now).unwrap_err().kind, UnknownPolicy);
    assert_eq!(token_audience(&token).unwrap().as_str(), "q");
    assert_eq!(token_audience("junk").unwrap_err().kind, Malformed);
}

#[test]
fn a_tokens_host_is_the_host_of_the_uri_it_is_for() {
    let host = |resource: &str| token_host(&generate_token(resource, ROOT, KEY, at_seconds(SE)));
    assert_eq!(host("sb://test-1.localhost/q").unwrap().as_deref(), Some("test-1.localhost"));
    assert_eq!(host("amqps://ns.localhost:5671").unwrap().as_deref(), Some("ns.localhost:5671"));
    assert_eq!(host("https://h?x=1").unwrap().as_deref(), Some("h"));
    assert_eq!(host("q/subscriptions/s").unwrap(), None);
    assert!(token_host("not a token").is_err());
}
