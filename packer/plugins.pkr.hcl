# Packer core and the one plugin this build uses, pinned exactly so every `make ami` resolves the same
# code. Upgrading is a reviewed one-line diff (releases: https://releases.hashicorp.com/packer-plugin-amazon).
packer {
  required_version = ">= 1.10.0, < 2.0.0"
  required_plugins {
    amazon = {
      version = "= 1.3.10"
      source  = "github.com/hashicorp/amazon"
    }
  }
}
