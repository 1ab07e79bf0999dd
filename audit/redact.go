package audit

import "strings"

// Redacted replaces secret values in recorded command lines.
const Redacted = "[REDACTED]"

// Redact returns a copy of args with values that look like secrets replaced
// by "[REDACTED]". It masks:
//   - the value of secret-named flags, as "--token=v" / "-token=v" or as the
//     following argument ("--token v"); secret names contain token, password,
//     passwd, secret, api-key/apikey/api_key, credential or private-key, or
//     are exactly "pass" ("-p" is not masked: mkdir -p, cp -p and ssh -p
//     are far more common than a password after a bare -p);
//   - env-style "NAME=value" args whose NAME contains TOKEN, SECRET,
//     PASSWORD, PASSWD, KEY or CREDENTIAL (case-insensitive);
//   - "Authorization: ..." header values and passwords in URL userinfo
//     ("https://user:pw@host").
//
// Redaction errs toward masking: an audit log must never carry a secret.
func Redact(args []string) []string {
	if args == nil {
		return nil
	}
	out := make([]string, len(args))
	maskNext := false
	for i, a := range args {
		if maskNext {
			maskNext = false
			out[i] = Redacted
			continue
		}
		out[i], maskNext = redactArg(a)
	}
	return out
}

// redactArg masks one argument and reports whether the next one is a value
// of a secret flag.
func redactArg(a string) (string, bool) {
	if strings.HasPrefix(a, "-") && a != "-" && a != "--" {
		name := strings.TrimPrefix(strings.TrimPrefix(a, "-"), "-")
		if k, _, ok := strings.Cut(name, "="); ok {
			if secretFlag(k) {
				return a[:strings.IndexByte(a, '=')+1] + Redacted, false
			}
			return redactInline(a), false
		}
		return a, secretFlag(name)
	}
	if k, _, ok := strings.Cut(a, "="); ok && isEnvName(k) {
		if secretEnv(k) {
			return k + "=" + Redacted, false
		}
	}
	return redactInline(a), false
}

func secretFlag(name string) bool {
	n := strings.ReplaceAll(strings.ToLower(name), "_", "-")
	switch n {
	case "pass":
		return true
	}
	for _, s := range []string{"token", "password", "passwd", "secret", "api-key", "apikey", "credential", "private-key"} {
		if strings.Contains(n, s) {
			return true
		}
	}
	return false
}

func secretEnv(name string) bool {
	n := strings.ToUpper(name)
	for _, s := range []string{"TOKEN", "SECRET", "PASSWORD", "PASSWD", "KEY", "CREDENTIAL"} {
		if strings.Contains(n, s) {
			return true
		}
	}
	return false
}

func isEnvName(s string) bool {
	if s == "" {
		return false
	}
	for i, c := range s {
		switch {
		case c == '_', c >= 'A' && c <= 'Z', c >= 'a' && c <= 'z':
		case c >= '0' && c <= '9' && i > 0:
		default:
			return false
		}
	}
	return true
}

// redactInline masks secrets embedded inside a single argument: an
// Authorization header value or the password of a URL's userinfo.
func redactInline(a string) string {
	if i := strings.Index(strings.ToLower(a), "authorization:"); i >= 0 {
		return a[:i+len("authorization:")] + " " + Redacted
	}
	// scheme://user:password@host → scheme://user:[REDACTED]@host
	var b strings.Builder
	rest := a
	for {
		i := strings.Index(rest, "://")
		if i < 0 {
			break
		}
		start := i + 3
		hostEnd := strings.IndexAny(rest[start:], "/?# ")
		if hostEnd < 0 {
			hostEnd = len(rest) - start
		}
		auth := rest[start : start+hostEnd]
		at := strings.LastIndexByte(auth, '@')
		colon := strings.IndexByte(auth, ':')
		if at < 0 || colon < 0 || colon > at {
			b.WriteString(rest[:start+hostEnd])
			rest = rest[start+hostEnd:]
			continue
		}
		b.WriteString(rest[:start+colon+1])
		b.WriteString(Redacted)
		rest = rest[start+at:]
	}
	if b.Len() == 0 {
		return a
	}
	b.WriteString(rest)
	return b.String()
}
