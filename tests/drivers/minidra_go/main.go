// Command minidra is a deliberately small DRA kubelet plugin for fakedev's conformance tests.
//
// It uses only the standard library, the kubelet's generated protos and gRPC: no client-go, no helper library.
// It registers with the kubelet (or the node emulator), publishes one ResourceSlice with N devices through plain
// HTTP + JSON, and writes one CDI spec per prepared claim. Flags switch on the misbehaviours the tests look for.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"google.golang.org/grpc"
	drapb "k8s.io/kubelet/pkg/apis/dra/v1"
	regpb "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

// options is the whole command line, parsed once.
type options struct {
	nodeName      string
	driverName    string
	kubeletRoot   string
	registryDir   string
	pluginsDir    string
	cdiDir        string
	kubeconfig    string
	devices       int
	missingNode   bool
	publishNone   bool
	neverAnswer   bool
	publishPeriod time.Duration
}

func envOr(name, fallback string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return fallback
}

func parseOptions(args []string) (options, error) {
	var o options
	fs := flag.NewFlagSet("minidra", flag.ContinueOnError)
	fs.StringVar(&o.nodeName, "node-name", envOr("NODE_NAME", ""), "the node this plugin serves ($NODE_NAME)")
	fs.StringVar(&o.driverName, "driver-name", "minidra.fakedev.example", "the DRA driver name")
	fs.StringVar(&o.kubeletRoot, "kubelet-root", envOr("KUBELET_ROOT", "/var/lib/kubelet"), "the kubelet's root directory ($KUBELET_ROOT)")
	fs.StringVar(&o.registryDir, "registry-dir", os.Getenv("KUBELET_REGISTRAR_DIRECTORY_PATH"), "where registration sockets go (default <kubelet-root>/plugins_registry)")
	fs.StringVar(&o.pluginsDir, "plugins-dir", os.Getenv("KUBELET_PLUGINS_DIRECTORY_PATH"), "where DRA sockets go (default <kubelet-root>/plugins)")
	fs.StringVar(&o.cdiDir, "cdi-dir", envOr("CDI_ROOT", "/var/run/cdi"), "where CDI specs are written ($CDI_ROOT)")
	fs.StringVar(&o.kubeconfig, "kubeconfig", os.Getenv("KUBECONFIG"), "kubeconfig of the API server ($KUBECONFIG)")
	fs.IntVar(&o.devices, "devices", 1, "how many devices to publish")
	fs.BoolVar(&o.missingNode, "cdi-missing-device-node", false, "CDI specs name a /dev node that does not exist")
	fs.BoolVar(&o.publishNone, "publish-nothing", false, "publish no ResourceSlice")
	fs.BoolVar(&o.neverAnswer, "never-answer", false, "accept every gRPC call and never reply")
	fs.DurationVar(&o.publishPeriod, "resync", 30*time.Second, "how often the slice is checked and repaired")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() != 0 {
		return o, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if o.registryDir == "" {
		o.registryDir = filepath.Join(o.kubeletRoot, "plugins_registry")
	}
	if o.pluginsDir == "" {
		o.pluginsDir = filepath.Join(o.kubeletRoot, "plugins")
	}
	switch {
	case o.nodeName == "":
		return o, errors.New("--node-name (or $NODE_NAME) is required")
	case o.devices < 0:
		return o, fmt.Errorf("--devices must be >= 0, got %d", o.devices)
	case o.kubeconfig == "" && !o.publishNone:
		return o, errors.New("--kubeconfig (or $KUBECONFIG) is required")
	}
	return o, nil
}

// listen removes a socket left by an earlier run (a kill -9 leaves it behind) and listens afresh.
func listen(path string) (net.Listener, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
		return nil, err
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	return net.Listen("unix", path)
}

func serve(path string, register func(*grpc.Server), opts ...grpc.ServerOption) (*grpc.Server, error) {
	lis, err := listen(path)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", path, err)
	}
	srv := grpc.NewServer(opts...)
	register(srv)
	go func() {
		if err := srv.Serve(lis); err != nil {
			log.Printf("serving %s ended: %v", path, err)
		}
	}()
	return srv, nil
}

func run(o options) error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()

	var api *apiClient
	if o.kubeconfig != "" {
		var err error
		if api, err = newAPIClient(o.kubeconfig); err != nil {
			return err
		}
	}
	plugin := &draPlugin{opts: o, api: api, cdi: cdiWriter{dir: o.cdiDir, driver: o.driverName, missingNode: o.missingNode}}
	var opts []grpc.ServerOption
	if o.neverAnswer {
		// Every call is taken in and held until the caller gives up: the driver is alive but mute.
		opts = append(opts, grpc.UnaryInterceptor(func(ctx context.Context, _ any, info *grpc.UnaryServerInfo, _ grpc.UnaryHandler) (any, error) {
			log.Printf("never answering %s", info.FullMethod)
			<-ctx.Done()
			return nil, ctx.Err()
		}))
	}

	draSocket := filepath.Join(o.pluginsDir, o.driverName, "dra.sock")
	regSocket := filepath.Join(o.registryDir, o.driverName+"-reg.sock")
	// The DRA service is served before the registration socket appears: the kubelet may call it at once.
	draServer, err := serve(draSocket, func(s *grpc.Server) { drapb.RegisterDRAPluginServer(s, plugin) }, opts...)
	if err != nil {
		return err
	}
	defer func() { draServer.Stop(); _ = os.Remove(draSocket) }()
	reg := &registration{driver: o.driverName, endpoint: draSocket}
	regServer, err := serve(regSocket, func(s *grpc.Server) { regpb.RegisterRegistrationServer(s, reg) }, opts...)
	if err != nil {
		return err
	}
	defer func() { regServer.Stop(); _ = os.Remove(regSocket) }()
	log.Printf("serving %s on %s, registration on %s", o.driverName, draSocket, regSocket)

	if o.publishNone || api == nil {
		log.Printf("publishing no ResourceSlice (--publish-nothing)")
	} else {
		go keepSlicePublished(ctx, api, sliceFor(o), o.publishPeriod)
	}
	<-ctx.Done()
	log.Printf("stopping")
	return nil
}

func main() {
	log.SetFlags(log.LstdFlags | log.Lmicroseconds)
	o, err := parseOptions(os.Args[1:])
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		fmt.Fprintln(os.Stderr, "minidra:", err)
		os.Exit(2)
	}
	if err := run(o); err != nil {
		fmt.Fprintln(os.Stderr, "minidra:", err)
		os.Exit(1)
	}
}
