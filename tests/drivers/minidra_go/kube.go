package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/url"
	"os"
	"reflect"
	"strings"
	"time"
)

// kubeconfig holds the few fields this driver reads. The file is YAML and only the standard library is allowed,
// so it is read line by line: the first value of each key wins, which suits a one-cluster, one-user kubeconfig
// (what fakedev writes); anything richer needs a real YAML parser.
type kubeconfig struct {
	server, ca, caData, cert, certData, key, keyData, token, tokenFile string
}

func readKubeconfig(path string) (kubeconfig, error) {
	f, err := os.Open(path)
	if err != nil {
		return kubeconfig{}, err
	}
	defer f.Close()
	var k kubeconfig
	fields := map[string]*string{
		"server": &k.server, "certificate-authority": &k.ca, "certificate-authority-data": &k.caData,
		"client-certificate": &k.cert, "client-certificate-data": &k.certData, "client-key": &k.key,
		"client-key-data": &k.keyData, "token": &k.token, "tokenFile": &k.tokenFile,
	}
	scanner := bufio.NewScanner(f)
	scanner.Buffer(make([]byte, 1<<20), 1<<22) // inline certificates make long lines
	for scanner.Scan() {
		line := strings.TrimLeft(strings.TrimSpace(scanner.Text()), "- ")
		key, value, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		target, known := fields[strings.TrimSpace(key)]
		if !known || *target != "" {
			continue
		}
		*target = strings.Trim(strings.TrimSpace(value), `"'`)
	}
	if err := scanner.Err(); err != nil {
		return k, err
	}
	if k.server == "" {
		return k, fmt.Errorf("%s: no server", path)
	}
	return k, nil
}

func pemFrom(file, data string) ([]byte, error) {
	if data != "" {
		return base64.StdEncoding.DecodeString(data)
	}
	if file != "" {
		return os.ReadFile(file)
	}
	return nil, nil
}

type apiClient struct {
	base   *url.URL
	http   *http.Client
	bearer string
}

func newAPIClient(path string) (*apiClient, error) {
	k, err := readKubeconfig(path)
	if err != nil {
		return nil, fmt.Errorf("kubeconfig: %w", err)
	}
	base, err := url.Parse(k.server)
	if err != nil {
		return nil, fmt.Errorf("kubeconfig %s: server: %w", path, err)
	}
	tlsConfig := &tls.Config{MinVersion: tls.VersionTLS12}
	caPEM, err := pemFrom(k.ca, k.caData)
	if err != nil {
		return nil, fmt.Errorf("kubeconfig %s: certificate authority: %w", path, err)
	}
	if caPEM != nil {
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(caPEM) {
			return nil, fmt.Errorf("kubeconfig %s: the certificate authority holds no PEM certificate", path)
		}
		tlsConfig.RootCAs = pool
	}
	certPEM, err := pemFrom(k.cert, k.certData)
	if err != nil {
		return nil, fmt.Errorf("kubeconfig %s: client certificate: %w", path, err)
	}
	keyPEM, err := pemFrom(k.key, k.keyData)
	if err != nil {
		return nil, fmt.Errorf("kubeconfig %s: client key: %w", path, err)
	}
	if certPEM != nil && keyPEM != nil {
		pair, err := tls.X509KeyPair(certPEM, keyPEM)
		if err != nil {
			return nil, fmt.Errorf("kubeconfig %s: client certificate: %w", path, err)
		}
		tlsConfig.Certificates = []tls.Certificate{pair}
	}
	bearer := k.token
	if bearer == "" && k.tokenFile != "" {
		data, err := os.ReadFile(k.tokenFile)
		if err != nil {
			return nil, fmt.Errorf("kubeconfig %s: token file: %w", path, err)
		}
		bearer = strings.TrimSpace(string(data))
	}
	return &apiClient{
		base:   base,
		http:   &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{TLSClientConfig: tlsConfig}},
		bearer: bearer,
	}, nil
}

// statusError is an answer other than 2xx, kept with its code so callers can tell "not found" apart.
type statusError struct {
	code int
	what string
	body string
}

func (e *statusError) Error() string {
	return fmt.Sprintf("%s: HTTP %d: %s", e.what, e.code, strings.TrimSpace(e.body))
}

func isNotFound(err error) bool {
	se, ok := err.(*statusError)
	return ok && se.code == http.StatusNotFound
}

// do sends body (if any) as JSON and decodes a 2xx answer into out (if any).
func (c *apiClient) do(ctx context.Context, method, path string, body, out any) error {
	var reader io.Reader
	if body != nil {
		data, err := json.Marshal(body)
		if err != nil {
			return err
		}
		reader = bytes.NewReader(data)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base.JoinPath(path).String(), reader)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", "application/json")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.bearer != "" {
		req.Header.Set("Authorization", "Bearer "+c.bearer)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return fmt.Errorf("%s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
	if err != nil {
		return fmt.Errorf("%s %s: reading the answer: %w", method, path, err)
	}
	if resp.StatusCode/100 != 2 {
		return &statusError{code: resp.StatusCode, what: method + " " + path, body: string(data)}
	}
	if out != nil {
		return json.Unmarshal(data, out)
	}
	return nil
}

// -- ResourceClaims --------------------------------------------------------------------------------------------

type objectMeta struct {
	Name            string           `json:"name"`
	UID             string           `json:"uid,omitempty"`
	ResourceVersion string           `json:"resourceVersion,omitempty"`
	OwnerReferences []ownerReference `json:"ownerReferences,omitempty"`
}

type allocationResult struct {
	Request string `json:"request"`
	Driver  string `json:"driver"`
	Pool    string `json:"pool"`
	Device  string `json:"device"`
}

type resourceClaim struct {
	Metadata objectMeta `json:"metadata"`
	Status   struct {
		Allocation *struct {
			Devices struct {
				Results []allocationResult `json:"results"`
			} `json:"devices"`
		} `json:"allocation"`
	} `json:"status"`
}

func (c *apiClient) getClaim(ctx context.Context, namespace, name string) (resourceClaim, error) {
	var claim resourceClaim
	err := c.do(ctx, http.MethodGet, fmt.Sprintf("/apis/resource.k8s.io/v1/namespaces/%s/resourceclaims/%s", namespace, name), nil, &claim)
	if isNotFound(err) {
		return claim, fmt.Errorf("claim %s/%s does not exist", namespace, name)
	}
	return claim, err
}

// -- ResourceSlices --------------------------------------------------------------------------------------------

type ownerReference struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Name       string `json:"name"`
	UID        string `json:"uid"`
	Controller bool   `json:"controller"`
}

type attribute struct {
	Int *int64 `json:"int,omitempty"`
}

type sliceDevice struct {
	Name       string               `json:"name"`
	Attributes map[string]attribute `json:"attributes,omitempty"`
}

type slicePool struct {
	Name               string `json:"name"`
	Generation         int64  `json:"generation"`
	ResourceSliceCount int64  `json:"resourceSliceCount"`
}

type sliceSpec struct {
	Driver   string        `json:"driver"`
	NodeName string        `json:"nodeName"`
	Pool     slicePool     `json:"pool"`
	Devices  []sliceDevice `json:"devices"`
}

type resourceSlice struct {
	APIVersion string     `json:"apiVersion"`
	Kind       string     `json:"kind"`
	Metadata   objectMeta `json:"metadata"`
	Spec       sliceSpec  `json:"spec"`
}

// sliceFor is the one slice of the node's one pool; the owner reference is filled in once the Node is known.
func sliceFor(o options) resourceSlice {
	devices := make([]sliceDevice, 0, o.devices)
	for i := 0; i < o.devices; i++ {
		index := int64(i)
		devices = append(devices, sliceDevice{Name: fmt.Sprintf("dev-%d", i), Attributes: map[string]attribute{"index": {Int: &index}}})
	}
	return resourceSlice{
		APIVersion: "resource.k8s.io/v1",
		Kind:       "ResourceSlice",
		Metadata:   objectMeta{Name: o.nodeName + "-" + o.driverName},
		Spec: sliceSpec{
			Driver:   o.driverName,
			NodeName: o.nodeName,
			Pool:     slicePool{Name: o.nodeName, Generation: 1, ResourceSliceCount: 1},
			Devices:  devices,
		},
	}
}

const slicesPath = "/apis/resource.k8s.io/v1/resourceslices"

// ensureSlice creates the slice, or replaces one that differs from it (a bumped generation tells the scheduler
// the pool changed). The slice is owned by the Node, so it goes when the Node goes.
func (c *apiClient) ensureSlice(ctx context.Context, want resourceSlice) error {
	var node struct {
		Metadata objectMeta `json:"metadata"`
	}
	if err := c.do(ctx, http.MethodGet, "/api/v1/nodes/"+want.Spec.NodeName, nil, &node); err != nil {
		return fmt.Errorf("the Node the slice belongs to: %w", err)
	}
	want.Metadata.OwnerReferences = []ownerReference{
		{APIVersion: "v1", Kind: "Node", Name: node.Metadata.Name, UID: node.Metadata.UID, Controller: true},
	}
	var have resourceSlice
	err := c.do(ctx, http.MethodGet, slicesPath+"/"+want.Metadata.Name, nil, &have)
	if isNotFound(err) {
		log.Printf("creating ResourceSlice %s with %d device(s)", want.Metadata.Name, len(want.Spec.Devices))
		return c.do(ctx, http.MethodPost, slicesPath, want, nil)
	}
	if err != nil {
		return err
	}
	if reflect.DeepEqual(have.Spec.Devices, want.Spec.Devices) && reflect.DeepEqual(have.Metadata.OwnerReferences, want.Metadata.OwnerReferences) {
		return nil
	}
	want.Metadata.ResourceVersion = have.Metadata.ResourceVersion
	want.Spec.Pool.Generation = have.Spec.Pool.Generation + 1
	log.Printf("updating ResourceSlice %s to generation %d", want.Metadata.Name, want.Spec.Pool.Generation)
	return c.do(ctx, http.MethodPut, slicesPath+"/"+want.Metadata.Name, want, nil)
}

// keepSlicePublished retries every second until the slice is there, then checks it every period.
func keepSlicePublished(ctx context.Context, c *apiClient, want resourceSlice, period time.Duration) {
	for {
		wait := period
		if err := c.ensureSlice(ctx, want); err != nil {
			log.Printf("publishing the ResourceSlice: %v (retrying)", err)
			wait = time.Second
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
	}
}
