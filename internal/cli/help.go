package cli

import (
	"fmt"
	"strings"

	"github.com/alecthomas/kong"
)

// usageLines replace kong's usage line where it cannot say what is meant.
var usageLines = map[string]string{
	"exec": "hsbx exec [flags] -- COMMAND [ARG...]",
}

// helpPrinter is kong's help with the global flags listed once: in `hsbx
// --help`, and by name only under a command's own flags.
func helpPrinter(options kong.HelpOptions, ctx *kong.Context) error {
	sel := ctx.Selected()
	if sel == nil {
		return kong.DefaultHelpPrinter(options, ctx)
	}
	var globals []string
	for _, f := range ctx.Model.Flags {
		if f.Hidden || f.Name == "help" || f.Name == "version" {
			continue
		}
		f.Hidden = true
		defer func() { f.Hidden = false }()
		globals = append(globals, "--"+f.Name)
	}
	if u, ok := usageLines[sel.Name]; ok {
		options.NoAppSummary = true
		fmt.Fprintf(ctx.Stdout, "Usage: %s\n", u)
	}
	if err := kong.DefaultHelpPrinter(options, ctx); err != nil {
		return err
	}
	_, err := fmt.Fprintf(ctx.Stdout, "\nGlobal flags, described in \"hsbx --help\":\n  %s\n", strings.Join(globals, ", "))
	return err
}
