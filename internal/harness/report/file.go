package report

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
)

// WriteHTMLFile writes the HTML report of c to the file path.
func WriteHTMLFile(path string, c *Comparison) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("writing HTML report: %w", err)
	}
	if err := WriteHTML(f, c); err != nil {
		f.Close()
		return fmt.Errorf("writing HTML report: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("writing HTML report: %w", err)
	}
	return nil
}

// WriteJSONFile writes v as indented JSON to the file path, or to stdout
// when path is "-".
func WriteJSONFile(path string, stdout io.Writer, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	b = append(b, '\n')
	if path == "-" {
		_, err = stdout.Write(b)
		return err
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		return fmt.Errorf("writing JSON: %w", err)
	}
	return nil
}
