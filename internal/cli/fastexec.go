package cli

import (
	"reflect"
	"strings"
	"unicode"
)

// fastExec reads the common shape of an exec command line without kong:
// `[GLOBAL...] exec [FLAG...] -- CMD...`, every flag spelled out with its
// value (`--task T`, `--task=T`, `-e K=V`, `-i`, ...). Building kong's
// model costs most of a warm exec's own time (see parse), and a session
// runs hundreds of these. Anything else — help, a bundle like -it, a
// value that is empty or begins with '-', no "--", an unknown word — is
// not taken (ok false) and kong parses it, with the last word on errors.
// The flags are ExecCmd's, read from its kong tags (fastCommand): declared
// once. TestFastExecAgreesWithKong and FuzzFastExec hold the two parsers
// to the same result.
func fastExec(args []string) (g Globals, c ExecCmd, ok bool) {
	g, ok = fastCommand(args, "exec", &c)
	return g, c, ok
}

// fastRun is fastExec for `hsbx run`, the other command a session makes
// hundreds of times (TestFastRunAgreesWithKong, FuzzFastRun).
func fastRun(args []string) (g Globals, c RunCmd, ok bool) {
	g, ok = fastCommand(args, "run", &c)
	return g, c, ok
}

// fastCommand reads `[GLOBAL...] command [FLAG...] -- REST...` into cmd
// (a pointer to a command's struct): its flags are the fields kong reads
// as flags (a help tag), named as kong names them (the name tag, or the
// field's name in kebab case; the short tag), of the kinds a fast line
// has (bool, string, []string, nameFlag); REST goes to its arg field.
func fastCommand(args []string, command string, cmd any) (Globals, bool) {
	flags := map[string]reflect.Value{}
	var arg reflect.Value
	commandFlags(reflect.ValueOf(cmd).Elem(), flags, &arg)
	g, rest, ok := fastParse(args, command, func(name string) bool {
		f, found := flags[name]
		if !found || f.Kind() != reflect.Bool {
			return false
		}
		f.SetBool(true)
		return true
	}, func(name, value string) bool {
		f, found := flags[name]
		switch {
		case !found:
			return false
		case f.Type() == reflect.TypeFor[nameFlag]():
			f.Set(reflect.ValueOf(nameFlag{Value: value, Set: true}))
		case f.Kind() == reflect.String:
			f.SetString(value)
		case f.Kind() == reflect.Slice && f.Type().Elem().Kind() == reflect.String:
			f.Set(reflect.Append(f, reflect.ValueOf(value)))
		default:
			return false
		}
		return true
	})
	if ok && arg.IsValid() {
		arg.Set(reflect.ValueOf(rest))
	}
	return g, ok
}

// commandFlags adds v's flag fields (and its embedded structs') to flags
// by every name kong gives them, and finds its arg field.
func commandFlags(v reflect.Value, flags map[string]reflect.Value, arg *reflect.Value) {
	t := v.Type()
	for i := range t.NumField() {
		sf, fv := t.Field(i), v.Field(i)
		if sf.Anonymous && sf.Type.Kind() == reflect.Struct {
			commandFlags(fv, flags, arg)
			continue
		}
		if _, ok := sf.Tag.Lookup("arg"); ok {
			*arg = fv
			continue
		}
		if _, ok := sf.Tag.Lookup("help"); !ok || !sf.IsExported() {
			continue
		}
		name := sf.Tag.Get("name")
		if name == "" {
			name = kebab(sf.Name)
		}
		flags["--"+name] = fv
		if short := sf.Tag.Get("short"); short != "" {
			flags["-"+short] = fv
		}
	}
}

// kebab is a Go field name as kong names its flag: MaxOutput is
// max-output, TTY tty.
func kebab(name string) string {
	var b strings.Builder
	for i, r := range name {
		if i > 0 && unicode.IsUpper(r) && unicode.IsLower(rune(name[i-1])) {
			b.WriteByte('-')
		}
		b.WriteRune(unicode.ToLower(r))
	}
	return b.String()
}

// fastParse reads `[GLOBAL...] command [FLAG...] -- REST...`: the globals
// itself, the command's flags through boolFlag and valueFlag (false: not
// one of its flags, so not taken).
func fastParse(args []string, command string, boolFlag func(name string) bool, valueFlag func(name, value string) bool) (g Globals, rest []string, ok bool) {
	seenCmd := false
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			if !seenCmd {
				return g, nil, false
			}
			return g, append([]string{}, args[i+1:]...), true
		}
		if a == command && !seenCmd {
			seenCmd = true
			continue
		}
		name, value, inline := strings.Cut(a, "=")
		if !strings.HasPrefix(name, "-") {
			return g, nil, false
		}
		if name == "--json" {
			if inline {
				return g, nil, false
			}
			g.JSON = true
			continue
		}
		if seenCmd && !inline && boolFlag(name) {
			continue
		}
		if name == "-i" || name == "--interactive" || name == "-t" || name == "--tty" {
			return g, nil, false // inline, before the command, or not the command's
		}
		if inline && !strings.HasPrefix(name, "--") {
			return g, nil, false // -e=K=V: kong's business
		}
		if !inline {
			if i+1 >= len(args) {
				return g, nil, false
			}
			i++
			value = args[i]
		}
		if value == "" || strings.HasPrefix(value, "-") {
			return g, nil, false
		}
		switch name {
		case "--runtime":
			g.Runtime = value
		case "--profile":
			g.Profile = nameFlag{Value: value, Set: true}
		case "--config":
			g.Config = value
		case "--log-level":
			g.LogLevel = value
		case "--engine-timeout":
			g.EngineTimeout = value
		case "--kube-context":
			g.KubeContext = value
		case "--kube-namespace":
			g.KubeNamespace = value
		default:
			if !seenCmd || !valueFlag(name, value) {
				return g, nil, false
			}
		}
	}
	return g, nil, false
}
