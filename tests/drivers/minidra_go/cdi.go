package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
)

// cdiClass is the class half of the CDI kind <driver>/<class>.
const cdiClass = "dev"

// A claim UID names files on disk; anything else than a UID's characters could walk out of the CDI directory.
var uidPattern = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,62}$`)

type cdiWriter struct {
	dir         string
	driver      string
	missingNode bool
}

type cdiSpec struct {
	CDIVersion string      `json:"cdiVersion"`
	Kind       string      `json:"kind"`
	Devices    []cdiDevice `json:"devices"`
}

type cdiDevice struct {
	Name           string         `json:"name"`
	ContainerEdits containerEdits `json:"containerEdits"`
}

type containerEdits struct {
	Env         []string        `json:"env,omitempty"`
	DeviceNodes []cdiDeviceNode `json:"deviceNodes,omitempty"`
}

type cdiDeviceNode struct {
	Path string `json:"path"`
}

func (w cdiWriter) kind() string { return w.driver + "/" + cdiClass }

// specPath is one file per claim, named after its UID: a CDI device name is never reused across claims.
func (w cdiWriter) specPath(claimUID string) (string, error) {
	if !uidPattern.MatchString(claimUID) {
		return "", fmt.Errorf("claim UID %q is not a UID", claimUID)
	}
	return filepath.Join(w.dir, fmt.Sprintf("%s-%s_%s.json", w.driver, cdiClass, claimUID)), nil
}

func envName(device string) string {
	upper := strings.ToUpper(device)
	return "MINIDRA_" + strings.Map(func(r rune) rune {
		if (r >= 'A' && r <= 'Z') || (r >= '0' && r <= '9') {
			return r
		}
		return '_'
	}, upper)
}

// writeClaim writes the claim's spec (atomically: a half-written spec must never be read) and returns one CDI ID
// per result, in order.
func (w cdiWriter) writeClaim(claimUID string, results []allocationResult) ([]string, error) {
	path, err := w.specPath(claimUID)
	if err != nil {
		return nil, err
	}
	spec := cdiSpec{CDIVersion: "0.6.0", Kind: w.kind()}
	ids := make([]string, 0, len(results))
	for _, r := range results {
		name := claimUID + "-" + r.Device
		edits := containerEdits{Env: []string{envName(r.Device) + "=" + claimUID}}
		if w.missingNode {
			// A path no host has: the runtime fails the container when it resolves the node's major/minor.
			edits.DeviceNodes = []cdiDeviceNode{{Path: "/dev/minidra-missing-" + r.Device}}
		}
		spec.Devices = append(spec.Devices, cdiDevice{Name: name, ContainerEdits: edits})
		ids = append(ids, w.kind()+"="+name)
	}
	data, err := json.MarshalIndent(spec, "", "  ")
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(w.dir, 0o755); err != nil {
		return nil, err
	}
	// The temporary name starts with a dot: CDI scanners skip such files.
	tmp, err := os.CreateTemp(w.dir, ".minidra-*.tmp")
	if err != nil {
		return nil, err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(append(data, '\n')); err != nil {
		tmp.Close()
		return nil, err
	}
	if err := tmp.Chmod(0o644); err != nil {
		tmp.Close()
		return nil, err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return nil, err
	}
	if err := tmp.Close(); err != nil {
		return nil, err
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return nil, err
	}
	return ids, nil
}

func (w cdiWriter) removeClaim(claimUID string) error {
	path, err := w.specPath(claimUID)
	if err != nil {
		return err
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}
