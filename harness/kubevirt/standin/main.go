// virt-launcher-standin reads the DRA device metadata of a VMI's GPUs and host devices from inside the compute
// container, with virt-launcher's rules, and prints the libvirt <hostdev> elements it would write.
//
// The VMI comes as JSON in the VMI_JSON environment variable. Exit status 1 and a line "error: <rule>: <why>"
// when virt-launcher would refuse to start the VM; otherwise it stays up, as virt-launcher does while the VM runs,
// until SIGTERM (or exits at once with --exit). The Python verifier (harness/kubevirt/launcher.py) implements
// the same rules on the host; the two must agree.
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"syscall"
)

const (
	attributesRoot = "/var/run/kubernetes.io/dra-device-attributes"
	v1alpha1       = "metadata.resource.k8s.io/v1alpha1"
	pciBusID       = "resource.kubernetes.io/pciBusID"
	mdevUUID       = "mdevUUID"
)

var bdfPattern = regexp.MustCompile(`^[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]$`)

type claimSource struct {
	Name                      string  `json:"name"`
	ResourceClaimName         *string `json:"resourceClaimName"`
	ResourceClaimTemplateName *string `json:"resourceClaimTemplateName"`
}

type deviceRef struct {
	Name        string `json:"name"`
	ClaimName   string `json:"claimName"`
	RequestName string `json:"requestName"`
}

type vmiSpec struct {
	Spec struct {
		ResourceClaims []claimSource `json:"resourceClaims"`
		Domain         struct {
			Devices struct {
				GPUs        []deviceRef `json:"gpus"`
				HostDevices []deviceRef `json:"hostDevices"`
			} `json:"devices"`
		} `json:"domain"`
	} `json:"spec"`
}

type attribute struct {
	String *string `json:"string"`
}

type metadataDevice struct {
	Driver     string               `json:"driver"`
	Pool       string               `json:"pool"`
	Name       string               `json:"name"`
	Attributes map[string]attribute `json:"attributes"`
}

type metadataObject struct {
	APIVersion string `json:"apiVersion"`
	Requests   []struct {
		Name    string           `json:"name"`
		Devices []metadataDevice `json:"devices"`
	} `json:"requests"`
}

type ruleError struct{ rule, why string }

func (e *ruleError) Error() string { return e.rule + ": " + e.why }

func fail(rule, format string, args ...any) error {
	return &ruleError{rule: rule, why: fmt.Sprintf(format, args...)}
}

func requestDir(ref deviceRef, claims []claimSource) (string, error) {
	for _, c := range claims {
		if c.Name != ref.ClaimName {
			continue
		}
		if c.ResourceClaimName != nil {
			return filepath.Join(attributesRoot, "resourceclaims", *c.ResourceClaimName, ref.RequestName), nil
		}
		return filepath.Join(attributesRoot, "resourceclaimtemplates", c.Name, ref.RequestName), nil
	}
	return "", fail("admission/claim-listed", "claim %q is not in spec.resourceClaims", ref.ClaimName)
}

func readDevice(dir, request string) (metadataDevice, string, error) {
	entries, _ := os.ReadDir(dir)
	var names []string
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), "-metadata.json") {
			names = append(names, e.Name())
		}
	}
	sort.Strings(names)
	if len(names) != 1 {
		return metadataDevice{}, "", fail("launcher/one-metadata-file",
			"%s: expected exactly one *-metadata.json, found %d: %s", dir, len(names), strings.Join(names, ", "))
	}
	path := filepath.Join(dir, names[0])
	raw, err := os.ReadFile(path)
	if err != nil {
		return metadataDevice{}, "", fail("launcher/one-metadata-file", "%s: %v", path, err)
	}
	decoder := json.NewDecoder(bytes.NewReader(raw))
	var chosen *metadataObject
	var seen []string
	for {
		var obj metadataObject
		if err := decoder.Decode(&obj); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return metadataDevice{}, "", fail("launcher/v1alpha1-object", "%s: not a JSON stream: %v", path, err)
		}
		seen = append(seen, obj.APIVersion)
		if obj.APIVersion == v1alpha1 && chosen == nil {
			o := obj
			chosen = &o
		}
	}
	if chosen == nil {
		return metadataDevice{}, "", fail("launcher/v1alpha1-object", "%s: no %s object in the stream (found %v)",
			path, v1alpha1, seen)
	}
	var devices []metadataDevice
	for _, r := range chosen.Requests {
		if r.Name == request {
			devices = append(devices, r.Devices...)
		}
	}
	if len(devices) != 1 {
		return metadataDevice{}, "", fail("launcher/one-device",
			"%s: request %q has %d devices, expected exactly one", path, request, len(devices))
	}
	return devices[0], path, nil
}

func hostdev(kind, name string, device metadataDevice, path string) (string, error) {
	alias := "ua-dra-gpu-" + name
	if kind == "hostDevice" {
		alias = "ua-dra-hostdevice-" + name
	}
	if a, ok := device.Attributes[mdevUUID]; ok && a.String != nil && *a.String != "" {
		return fmt.Sprintf("<hostdev mode='subsystem' type='mdev' managed='no' model='vfio-pci'>\n"+
			"  <source>\n    <address uuid='%s'/>\n  </source>\n  <alias name='%s'/>\n</hostdev>", *a.String, alias), nil
	}
	a, ok := device.Attributes[pciBusID]
	if !ok || a.String == nil || *a.String == "" {
		return "", fail("launcher/address", "%s: device %q has no mdevUUID or pciBusID", path, device.Name)
	}
	if !bdfPattern.MatchString(*a.String) {
		return "", fail("launcher/bdf-format", "%s: pciBusID %q is not a PCI address (DDDD:BB:DD.F)", path, *a.String)
	}
	parts := strings.FieldsFunc(*a.String, func(r rune) bool { return r == ':' || r == '.' })
	var n [4]uint64
	for i, p := range parts {
		n[i], _ = strconv.ParseUint(p, 16, 32)
	}
	return fmt.Sprintf("<hostdev mode='subsystem' type='pci' managed='no'>\n  <source>\n"+
		"    <address domain='0x%04x' bus='0x%02x' slot='0x%02x' function='0x%x'/>\n  </source>\n"+
		"  <alias name='%s'/>\n</hostdev>", n[0], n[1], n[2], n[3], alias), nil
}

func run() error {
	var vmi vmiSpec
	if err := json.Unmarshal([]byte(os.Getenv("VMI_JSON")), &vmi); err != nil {
		return fail("input", "VMI_JSON is not a VMI in JSON: %v", err)
	}
	gpus, produced, total := 0, 0, 0
	lists := []struct {
		kind string
		refs []deviceRef
	}{{"gpu", vmi.Spec.Domain.Devices.GPUs}, {"hostDevice", vmi.Spec.Domain.Devices.HostDevices}}
	for _, list := range lists {
		for _, ref := range list.refs {
			if ref.ClaimName == "" || ref.RequestName == "" {
				continue
			}
			if list.kind == "gpu" {
				gpus++
			}
			dir, err := requestDir(ref, vmi.Spec.ResourceClaims)
			if err != nil {
				return err
			}
			device, path, err := readDevice(dir, ref.RequestName)
			if err != nil {
				return err
			}
			xml, err := hostdev(list.kind, ref.Name, device, path)
			if err != nil {
				return err
			}
			fmt.Println(xml)
			total++
			if list.kind == "gpu" {
				produced++
			}
		}
	}
	if gpus != produced {
		return fail("launcher/gpu-count", "%d DRA GPUs but %d host devices", gpus, produced)
	}
	fmt.Printf("virt-launcher-standin: %d hostdevs\n", total)
	return nil
}

func main() {
	if err := run(); err != nil {
		fmt.Println("error: " + err.Error())
		os.Exit(1)
	}
	if len(os.Args) > 1 && os.Args[1] == "--exit" {
		return
	}
	// Like virt-launcher, stay up while "the VM runs": until the pod is deleted.
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	<-stop
}
