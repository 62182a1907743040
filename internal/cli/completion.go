package cli

import (
	"context"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/alecthomas/kong"
	kongcompletion "github.com/jotaen/kong-completion"
	"github.com/posener/complete"

	"github.com/hsbx/hsbx"
	"github.com/hsbx/hsbx/config"
	"github.com/hsbx/hsbx/internal/environ"
)

// CompletionCmd prints the shell code that turns on tab completion.
type CompletionCmd struct {
	Shell string `arg:"" enum:"bash,zsh,fish" help:"bash, zsh or fish."`
}

// Help is shown under the usage line.
func (c *CompletionCmd) Help() string {
	return `Prints the code that makes your shell complete hsbx's commands, flags and
--task values (the tasks of the profile's sandboxes, asked of the engine).
Load it in your shell's start-up file:

  bash   echo 'source <(hsbx completion bash)' >> ~/.bashrc
  zsh    echo 'source <(hsbx completion zsh)' >> ~/.zshrc
  fish   echo 'hsbx completion fish | source' >> ~/.config/fish/config.fish

The code calls this hsbx binary by its absolute path.`
}

// Run implements the command with kong-completion's shell code. For zsh
// it first loads zsh's completion system when the start-up file has not
// (a fresh .zshrc has no compinit; bashcompinit needs its compdef).
func (c *CompletionCmd) Run(kctx *kong.Context) error {
	if c.Shell == "zsh" {
		if _, err := io.WriteString(kctx.Stdout, zshCompinit); err != nil {
			return err
		}
	}
	return (&kongcompletion.Completion{Shell: c.Shell, Code: true}).Run(kctx)
}

// zshCompinit loads zsh's completion system unless it is loaded already
// (compdef defined): -i skips directories compaudit finds insecure
// instead of asking on every start.
const zshCompinit = `(( $+functions[compdef] )) || { autoload -U compinit && compinit -i; }
`

// completionTimeout bounds asking the engine for task names: a shell
// waiting on a tab must not hang on a dead daemon.
const completionTimeout = 2 * time.Second

// completeLine answers a shell's completion request (COMP_LINE is set) and
// returns the exit code; ok is false when this is no such request.
func completeLine(ctx context.Context, env Env) (code int, ok bool) {
	if line, set := environ.Lookup(env.Environ, "COMP_LINE"); !set || line == "" {
		return 0, false
	}
	code = ExitOK
	var g grammar
	p, err := newParser(&g, env, &code)
	if err != nil {
		return ExitError, true
	}
	kongcompletion.Register(p,
		kongcompletion.WithPredictor("task", complete.PredictFunc(func(a complete.Args) []string { return taskNames(ctx, env, a) })),
		kongcompletion.WithPredictor("runtime", complete.PredictOr(complete.PredictSet("docker", "podman"), complete.PredictFiles("*"))),
		kongcompletion.WithPredictor("level", complete.PredictSet("debug", "info", "warn", "error")),
		kongcompletion.WithExitFunc(func(c int) { code = c }),
		kongcompletion.WithErrorHandler(func(error) { code = ExitError }),
	)
	return code, true
}

// taskNames are the tasks of the sandboxes of the profile the command line
// so far names (or the configured one), from one engine call; nothing on
// any error.
func taskNames(ctx context.Context, env Env, a complete.Args) []string {
	var flags []config.Flag
	var file string
	line, _ := environ.Lookup(env.Environ, "COMP_LINE")
	words := strings.Fields(line) // the whole line: a.All starts after the subcommand
	for i, w := range words {
		for _, f := range []struct{ flag, key string }{{"--profile", "profile"}, {"--runtime", "runtime"}, {"--config", ""}} {
			v, ok := strings.CutPrefix(w, f.flag+"=")
			if !ok && w == f.flag && i+1 < len(words) {
				v, ok = words[i+1], true
			}
			switch {
			case ok && f.key != "":
				flags = append(flags, config.Flag{Key: f.key, Value: v, Name: f.flag})
			case ok:
				file = v
			}
		}
	}
	cfg, err := config.Load(config.Options{File: file, Getenv: environ.Getter(env.Environ), Flags: flags})
	if err != nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, completionTimeout)
	defer cancel()
	cfg.EngineTimeout.Value = completionTimeout
	c, err := hsbx.Open(ctx, hsbx.Options{Config: cfg, Environ: env.Environ, NoAutoSweep: true})
	if err != nil {
		return nil
	}
	ls, err := c.List(ctx)
	if err != nil {
		return nil
	}
	var tasks []string
	for _, l := range ls {
		if !slices.Contains(tasks, l.Task) && strings.HasPrefix(l.Task, a.Last) {
			tasks = append(tasks, l.Task)
		}
	}
	slices.Sort(tasks)
	return tasks
}
