// imagetool assembles, pushes and unpacks the controller's OCI image with go-containerregistry,
// so no container engine or base image pull is needed.
//
//	imagetool build  -out DIR -layer base.tar -layer app.tar -entrypoint /bin -user 65532:65532 -env K=V -label K=V
//	imagetool push   -layout DIR -ref HOST/REPO:TAG         (prints the pushed digest)
//	imagetool digest -layout DIR                            (prints the manifest digest)
//	imagetool extract -ref HOST/REPO@DIGEST -file /path -out FILE
//
// Layers are given as uncompressed tarballs written deterministically by the caller; the image
// config carries no timestamps, so the same inputs always give the same digest.
package main

import (
	"archive/tar"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

type list []string

func (l *list) String() string     { return strings.Join(*l, ",") }
func (l *list) Set(v string) error { *l = append(*l, v); return nil }

func main() {
	if len(os.Args) < 2 {
		fail(errors.New("usage: imagetool build|push|digest|extract [flags]"))
	}
	var err error
	switch os.Args[1] {
	case "build":
		err = build(os.Args[2:])
	case "push":
		err = push(os.Args[2:])
	case "digest":
		err = digest(os.Args[2:])
	case "extract":
		err = extract(os.Args[2:])
	default:
		err = fmt.Errorf("unknown command %q", os.Args[1])
	}
	if err != nil {
		fail(err)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "imagetool:", err)
	os.Exit(1)
}

func build(args []string) error {
	fs := flag.NewFlagSet("build", flag.ExitOnError)
	out := fs.String("out", "", "OCI layout directory to write")
	entrypoint := fs.String("entrypoint", "", "entrypoint binary")
	user := fs.String("user", "", "user:group")
	arch := fs.String("arch", "amd64", "architecture")
	var layers, env, labels list
	fs.Var(&layers, "layer", "uncompressed layer tarball (repeatable, bottom first)")
	fs.Var(&env, "env", "KEY=VALUE (repeatable)")
	fs.Var(&labels, "label", "KEY=VALUE (repeatable)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *out == "" || *entrypoint == "" || len(layers) == 0 {
		return errors.New("build needs -out, -entrypoint and at least one -layer")
	}
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	for _, path := range layers {
		layer, err := tarball.LayerFromFile(path, tarball.WithMediaType(types.OCILayer))
		if err != nil {
			return fmt.Errorf("layer %s: %w", path, err)
		}
		if img, err = mutate.Append(img, mutate.Addendum{
			Layer:     layer,
			MediaType: types.OCILayer,
			History:   v1.History{CreatedBy: "scripts/build-image.sh: " + baseName(path)},
		}); err != nil {
			return err
		}
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		return err
	}
	cfg = cfg.DeepCopy()
	cfg.Architecture = *arch
	cfg.OS = "linux"
	cfg.Config.Entrypoint = []string{*entrypoint}
	cfg.Config.User = *user
	cfg.Config.WorkingDir = "/"
	cfg.Config.Env = env
	cfg.Config.Labels = map[string]string{}
	for _, kv := range labels {
		k, v, _ := strings.Cut(kv, "=")
		cfg.Config.Labels[k] = v
	}
	if img, err = mutate.ConfigFile(img, cfg); err != nil {
		return err
	}
	if err := os.RemoveAll(*out); err != nil {
		return err
	}
	p, err := layout.Write(*out, empty.Index)
	if err != nil {
		return err
	}
	if err := p.AppendImage(img); err != nil {
		return err
	}
	d, err := img.Digest()
	if err != nil {
		return err
	}
	fmt.Println(d.String())
	return nil
}

func image(dir string) (v1.Image, error) {
	p, err := layout.FromPath(dir)
	if err != nil {
		return nil, err
	}
	idx, err := p.ImageIndex()
	if err != nil {
		return nil, err
	}
	m, err := idx.IndexManifest()
	if err != nil {
		return nil, err
	}
	if len(m.Manifests) != 1 {
		return nil, fmt.Errorf("%s holds %d images, want 1", dir, len(m.Manifests))
	}
	return idx.Image(m.Manifests[0].Digest)
}

func digest(args []string) error {
	fs := flag.NewFlagSet("digest", flag.ExitOnError)
	dir := fs.String("layout", "", "OCI layout directory")
	if err := fs.Parse(args); err != nil {
		return err
	}
	img, err := image(*dir)
	if err != nil {
		return err
	}
	d, err := img.Digest()
	if err != nil {
		return err
	}
	fmt.Println(d.String())
	return nil
}

// push uses the default keychain and the system's TLS roots (SSL_CERT_FILE is honoured).
func push(args []string) error {
	fs := flag.NewFlagSet("push", flag.ExitOnError)
	dir := fs.String("layout", "", "OCI layout directory")
	ref := fs.String("ref", "", "destination HOST/REPO:TAG")
	if err := fs.Parse(args); err != nil {
		return err
	}
	img, err := image(*dir)
	if err != nil {
		return err
	}
	tag, err := name.ParseReference(*ref)
	if err != nil {
		return err
	}
	if err := remote.Write(tag, img); err != nil {
		return err
	}
	d, err := img.Digest()
	if err != nil {
		return err
	}
	fmt.Println(d.String())
	return nil
}

// extract copies one file out of a pushed image's flattened filesystem.
func extract(args []string) error {
	fs := flag.NewFlagSet("extract", flag.ExitOnError)
	ref := fs.String("ref", "", "image HOST/REPO@DIGEST or :TAG")
	file := fs.String("file", "", "absolute path inside the image")
	out := fs.String("out", "", "where to write it")
	if err := fs.Parse(args); err != nil {
		return err
	}
	r, err := name.ParseReference(*ref)
	if err != nil {
		return err
	}
	img, err := remote.Image(r)
	if err != nil {
		return err
	}
	rc := mutate.Extract(img)
	defer rc.Close()
	want := strings.TrimPrefix(*file, "/")
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return fmt.Errorf("%s is not in %s", *file, *ref)
		}
		if err != nil {
			return err
		}
		if strings.TrimPrefix(h.Name, "./") != want {
			continue
		}
		f, err := os.OpenFile(*out, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, os.FileMode(h.Mode)&0o755)
		if err != nil {
			return err
		}
		if _, err := io.Copy(f, tr); err != nil {
			f.Close()
			return err
		}
		return f.Close()
	}
}

func baseName(path string) string {
	return path[strings.LastIndex(path, "/")+1:]
}
